"""Gradients of gradients (create_graph), torch.autograd.functional, tensor and module hooks, and a
non-leaf's repr, against PyTorch."""

import numpy as np
import pytest

import gradcraft as gc
import gradcraft.nn as gnn
import gradcraft.nn.functional as GF

torch = pytest.importorskip("torch")
TF = torch.nn.functional

RNG = np.random.default_rng(0)
X = RNG.normal(size=(3, 4))
W = RNG.normal(size=(5, 4)) * 0.5
B = RNG.normal(size=5) * 0.1
LN = 1 + 0.1 * RNG.normal(size=5)


def _close(a, b, tol=1e-9):
    a = a.numpy() if hasattr(a, "numpy") and not isinstance(a, np.ndarray) else a
    b = b.detach().numpy() if hasattr(b, "detach") else b
    np.testing.assert_allclose(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64), rtol=1e-6, atol=tol)


def _network(lib, F, x, w, b, ln, act):
    """A small net through the ops whose gradients are fused kernels (linear with bias, layer_norm, softmax...)."""
    h = F.linear(x, w, b)
    h = {"gelu": F.gelu, "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"), "silu": F.silu, "tanh": lib.tanh}[act](h)
    h = F.layer_norm(h, (5,), ln, None)
    h = F.rms_norm(h, (5,), ln) + F.softmax(h, dim=1)
    return F.cross_entropy(h, lib.tensor([1, 4, 0]), label_smoothing=0.1) + F.log_softmax(h, dim=0).pow(2).mean()


@pytest.mark.parametrize("act", ["gelu", "gelu_tanh", "silu", "tanh"])
def test_gradient_penalty_and_second_order_match_torch(act):
    results = []
    for lib, F in ((gc, GF), (torch, TF)):
        x = lib.tensor(X, dtype=lib.float64, requires_grad=True)
        w, b, ln = (lib.tensor(a, dtype=lib.float64, requires_grad=True) for a in (W, B, LN))
        loss = _network(lib, F, x, w, b, ln, act)
        (gx,) = lib.autograd.grad(loss, x, create_graph=True)
        penalty = ((gx.norm(2, dim=1) - 1) ** 2).mean()
        penalty.backward()
        first = [t.grad for t in (w, b, ln)]
        # backward(create_graph=True) then a loss of the leaves' .grad
        for t in (w, b, ln, x):
            t.grad = None
        _network(lib, F, x, w, b, ln, act).backward(create_graph=True)
        (w.grad.pow(2).sum() + ln.grad.sum() * b.grad.sum()).backward(inputs=[x, ln])
        results.append((gx, penalty, *first, x.grad, ln.grad))
    for a, b in zip(*results):
        _close(a, b)


def test_autograd_functional_matches_torch():
    def f(lib):
        return lambda a, b: (a.sin() * b.exp()).sum() + (a[0] * b[1]) ** 2

    def vec(lib):
        return lambda a: (a.tanh() * a.sum(), a.pow(3))

    out = []
    for lib in (gc, torch):
        a = lib.tensor([0.3, -1.2, 0.7], dtype=lib.float64)
        b = lib.tensor([0.5, 0.1, -0.4], dtype=lib.float64)
        v = lib.tensor([1.0, -2.0, 0.5], dtype=lib.float64)
        fn = lib.autograd.functional
        h = fn.hessian(f(lib), (a, b))
        j = fn.jacobian(vec(lib), a)
        out.append(
            [*(h[i][k] for i in range(2) for k in range(2)), *j]
            + list(fn.hvp(lambda t: f(lib)(t, b), a, v))
            + list(fn.vhp(lambda t: f(lib)(t, b), a, v))
            + [fn.vjp(lambda t: vec(lib)(t)[1], a, v)[1], fn.jvp(lambda t: vec(lib)(t)[0], a, v)[1]]
            + [fn.hessian(lambda t: (t**4).sum(), a)]
        )
    for x, y in zip(*out):
        _close(x, y)


def test_relu_second_derivative_is_connected_zero_as_torch():
    out = []
    for lib in (gc, torch):
        x = lib.tensor([[0.3, -0.2, 1.5]], requires_grad=True)
        w = lib.tensor([[1.0, -2.0, 0.5], [0.3, 0.2, -1.0]], requires_grad=True)
        (g,) = lib.autograd.grad(lib.relu(x @ w.T).sum(), x, create_graph=True)
        (h,) = lib.autograd.grad(g.sum(), x, retain_graph=True)
        ((g**2).sum()).backward()
        out.append([g, h, w.grad])
    for a, b in zip(*out):
        _close(a, b, 1e-6)


def test_custom_function_and_hooked_module_differentiate_twice_as_torch():
    out = []
    for lib, nn in ((gc, gnn), (torch, torch.nn)):

        class Cube(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return x**3

            @staticmethod
            def backward(ctx, g):
                (x,) = ctx.saved_tensors
                return g * 3 * x**2

        x = lib.tensor([[0.5, -1.0], [2.0, 0.25]], requires_grad=True)
        net = nn.Sequential(nn.Linear(2, 3), nn.Tanh(), nn.Linear(3, 1))
        with lib.no_grad():
            for p in net.parameters():
                p.copy_(lib.linspace(-1, 1, p.numel()).reshape(p.shape))
        seen = []
        net[0].register_full_backward_hook(lambda m, gi, go: seen.append(go[0].detach().clone()))
        (g,) = lib.autograd.grad(net(Cube.apply(x)).sum(), x, create_graph=True)
        ((g.norm(2, dim=1) - 1) ** 2).sum().backward()
        out.append([g, x.grad, net[0].weight.grad, net[2].weight.grad, seen[0]])
    for a, b in zip(*out):
        _close(a, b, 1e-5)


def test_gradgradcheck_and_refusals():
    x = gc.tensor(X, dtype=gc.float64, requires_grad=True)
    assert gc.autograd.gradgradcheck(lambda t: GF.softmax(t, dim=1) * t.exp(), (x,))
    assert gc.autograd.gradgradcheck(lambda t: GF.embedding(gc.tensor([2, 0, 2]), t) ** 3, (x,))
    q = gc.tensor(RNG.normal(size=(1, 1, 3, 4)), requires_grad=True)
    out = GF.scaled_dot_product_attention(q, q, q).sum()
    with pytest.raises(gc.UserError, match="cannot be differentiated again"):
        gc.autograd.grad(out, q, create_graph=True)


def test_tensor_hooks_and_retain_grad_match_torch():
    out = []
    for lib in (gc, torch):
        a = lib.tensor([1.0, -2.0, 0.5], requires_grad=True)
        b = a * 3
        c = b.exp() * a
        b.retain_grad()
        c.retain_grad()
        seen = []
        handle = b.register_hook(lambda g: g * 2)
        a.register_hook(lambda g: seen.append(g.detach().clone()))
        c.register_hook(lambda g: None)
        c.sum().backward()
        out.append([a.grad, b.grad, c.grad, seen[0]])
        handle.remove()
        a.grad = None
        (a * 3).exp().sum().backward()
        out[-1].append(a.grad)
        assert b.retains_grad and not a.retains_grad
        (g,) = lib.autograd.grad((a * a).sum(), a)
        out[-1].append(g)
    for x, y in zip(*out):
        _close(x, y, 1e-5)
    with pytest.raises(RuntimeError):
        gc.tensor([1.0]).register_hook(lambda g: g)


def test_module_hooks_match_torch():
    out = []
    for lib, nn in ((gc, gnn), (torch, torch.nn)):
        lin = nn.Linear(4, 5)
        with lib.no_grad():
            lin.weight.copy_(lib.tensor(W, dtype=lib.float32))
            lin.bias.copy_(lib.tensor(B, dtype=lib.float32))
        record = []
        pre = lin.register_forward_pre_hook(lambda m, args: (args[0] * 2,))
        fwd = lin.register_forward_hook(lambda m, args, o: o + 1)
        kw = lin.register_forward_hook(
            lambda m, args, kwargs, o: record.append(("kw", o.detach().clone())), with_kwargs=True
        )

        def backward_hook(m, grad_input, grad_output):
            record.append((grad_input[0].detach().clone(), grad_output[0].detach().clone()))
            return (grad_input[0] * 0.5,)

        bwd = lin.register_full_backward_hook(backward_hook)
        x = lib.tensor(X, dtype=lib.float32, requires_grad=True)
        y = lin(x)
        (y**2).sum().backward()
        out.append([y, record[0][1], record[1][0], record[1][1], x.grad, lin.weight.grad.clone()])
        for h in (pre, fwd, kw, bwd):
            h.remove()
        x.grad = None
        lin(x).sum().backward()
        out[-1] += [x.grad, lib.tensor(float(len(record)))]
        # no input requires grad: the hook runs with grad_input (None,)
        seq = nn.Sequential(nn.Linear(4, 2), nn.Tanh())
        with lib.no_grad():
            for p in seq.parameters():
                p.copy_(lib.linspace(-0.5, 0.5, p.numel()).reshape(p.shape))
        got = []
        seq[0].register_full_backward_hook(lambda m, gi, go: got.append((gi, go[0].detach().clone())))
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            seq(lib.tensor(X, dtype=lib.float32)).sum().backward()
        assert got[0][0] == (None,)
        out[-1].append(got[0][1])
    for a, b in zip(*out):
        _close(a, b, 1e-5)


def test_non_leaf_repr_shows_grad_fn():
    x = gc.ones(2, requires_grad=True)
    assert "grad_fn=<MulBackward0>" in repr(x * 2)
    assert "requires_grad=True" in repr(x) and "grad_fn" not in repr(x)
    assert "grad" not in repr((x * 2).detach())
