"""torch.autograd.Function, autograd.grad, autograd.backward and Tensor.grad_fn against PyTorch."""

import numpy as np
import pytest

import gradcraft as gc

torch = pytest.importorskip("torch")

X = np.array([[0.5, -1.0, 2.0], [0.25, 1.5, -0.75]])
W = np.array([[1.0, -2.0, 0.5], [0.3, 0.7, -1.1]])


def _functions(lib):
    class Legendre3(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return 0.5 * (5 * x**3 - 3 * x)

        @staticmethod
        def backward(ctx, grad_output):
            (x,) = ctx.saved_tensors
            return grad_output * 1.5 * (5 * x**2 - 1)

    class ScaledMul(lib.autograd.Function):
        """Two tensors and a number; two outputs; ctx attributes; needs_input_grad."""

        @staticmethod
        def forward(ctx, a, b, scale):
            ctx.scale = scale
            ctx.save_for_backward(a, b)
            ctx.needs = ctx.needs_input_grad
            return a * b * scale, (a + b).sum(dim=1)

        @staticmethod
        def backward(ctx, g_prod, g_sum):
            a, b = ctx.saved_tensors
            ga = g_prod * b * ctx.scale + g_sum[:, None] if ctx.needs_input_grad[0] else None
            gb = g_prod * a * ctx.scale + g_sum[:, None] if ctx.needs_input_grad[1] else None
            return ga, gb, None

    class ClampSTE(lib.autograd.Function):
        """Straight-through clamp, with a non-differentiable mask output and once_differentiable."""

        @staticmethod
        def forward(ctx, x, low, high):
            mask = (x >= low) & (x <= high)
            ctx.mark_non_differentiable(mask)
            return x.clamp(low, high), mask

        @staticmethod
        @lib.autograd.function.once_differentiable
        def backward(ctx, g, g_mask):
            return g, None, None

    class NewStyle(lib.autograd.Function):
        @staticmethod
        def forward(x, k):
            return x.exp() * k

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.k = inputs[1]
            ctx.save_for_backward(output)

        @staticmethod
        def backward(ctx, g):
            (y,) = ctx.saved_tensors
            return g * y, None

    class NoMaterialize(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.set_materialize_grads(False)
            return x * 2, x * 3

        @staticmethod
        def backward(ctx, g1, g2):
            ctx.seen = (g1 is None, g2 is None)
            total = 0
            if g1 is not None:
                total = total + g1 * 2
            if g2 is not None:
                total = total + g2 * 3
            return total

    return Legendre3, ScaledMul, ClampSTE, NewStyle, NoMaterialize


def _run(lib):
    Legendre3, ScaledMul, ClampSTE, NewStyle, NoMaterialize = _functions(lib)
    x = lib.tensor(X, requires_grad=True)
    w = lib.tensor(W, requires_grad=True)
    out = {}
    y = Legendre3.apply(x)
    prod, s = ScaledMul.apply(y, w, 0.5)
    c, mask = ClampSTE.apply(prod, -0.5, 0.5)
    n = NewStyle.apply(w, 3.0)
    loss = (c * c).sum() + (s**2).sum() + n.sum()
    out["flags"] = (mask.requires_grad, c.requires_grad, y.requires_grad, y.is_leaf)
    out["names"] = (type(y.grad_fn).__name__, y.grad_fn.name(), type(n.grad_fn).__name__)
    loss.backward()
    out["loss"] = loss.item()
    out["x.grad"] = x.grad.numpy()
    out["w.grad"] = w.grad.numpy()
    out["mask"] = mask.numpy()
    a = lib.tensor(X, requires_grad=True)
    p1, p2 = NoMaterialize.apply(a)
    p2.sum().backward()
    out["no_materialize"] = a.grad.numpy()
    return out


def test_custom_functions_match_torch():
    ours, theirs = _run(gc), _run(torch)
    for key in theirs:
        if isinstance(theirs[key], np.ndarray):
            np.testing.assert_allclose(ours[key], theirs[key], rtol=1e-12, err_msg=key)
        else:
            assert ours[key] == theirs[key], key


def test_needs_input_grad_and_materialize():
    _, ScaledMul, _, _, NoMaterialize = _functions(gc)
    a = gc.tensor(X, requires_grad=True)
    b = gc.tensor(W)
    prod, _ = ScaledMul.apply(a, b, 2.0)
    prod.grad_fn  # noqa: B018 (the property runs)
    prod.sum().backward()
    assert a.grad is not None and b.grad is None
    np.testing.assert_allclose(a.grad.numpy(), W * 2.0)
    x = gc.tensor(X, requires_grad=True)
    p1, p2 = NoMaterialize.apply(x)
    p2.sum().backward()
    assert p1.grad_fn.name() == "NoMaterializeBackward"
    with gc.no_grad():
        y = NoMaterialize.apply(x)[0]
    assert not y.requires_grad


def test_wrong_gradient_count_and_shape():
    for lib in (gc, torch):

        class TooFew(lib.autograd.Function):
            @staticmethod
            def forward(ctx, a, b):
                return a * b

            @staticmethod
            def backward(ctx, g):
                return g

        class BadShape(lib.autograd.Function):
            @staticmethod
            def forward(ctx, a):
                return a * 2

            @staticmethod
            def backward(ctx, g):
                return g[:, :2]

        class GradForNumber(lib.autograd.Function):
            @staticmethod
            def forward(ctx, a, k):
                return a * k

            @staticmethod
            def backward(ctx, g):
                return g, g

        a, b = lib.tensor(X, requires_grad=True), lib.tensor(W, requires_grad=True)
        with pytest.raises(RuntimeError, match="returned an incorrect number of gradients"):
            TooFew.apply(a, b).sum().backward()
        with pytest.raises(RuntimeError, match="returned an invalid gradient at index 0"):
            BadShape.apply(a).sum().backward()
        with pytest.raises(RuntimeError, match="returned a gradient different than None at position 2"):
            GradForNumber.apply(a, 2.0).sum().backward()


def test_broadcast_gradient_is_summed():
    for lib in (gc, torch):

        class Broad(lib.autograd.Function):
            @staticmethod
            def forward(ctx, a):
                return a * 1.0

            @staticmethod
            def backward(ctx, g):
                return g.expand(4, *g.shape)

        a = lib.tensor(X, requires_grad=True)
        Broad.apply(a).sum().backward()
        np.testing.assert_allclose(a.grad.numpy() if lib is gc else a.grad.numpy(), np.full_like(X, 4.0))


def _grad_calls(lib):
    x = lib.tensor(X, requires_grad=True)
    w = lib.tensor(W, requires_grad=True)
    h = (x * w).tanh()
    y = (h**2).sum() + x.sum()
    gx, gh = lib.autograd.grad(y, [x, h], retain_graph=True)
    (gw,) = lib.autograd.grad([y, h.sum()], w, grad_outputs=[lib.tensor(2.0, dtype=lib.float64), None])
    unused = lib.tensor(1.0, requires_grad=True)
    z = (x * 3).sum()
    gz = lib.autograd.grad(z, [x, unused], allow_unused=True)
    v = (x * w).sum()
    lib.autograd.backward([v, (x**2).sum()], inputs=[x])
    return gx.numpy(), gh.numpy(), gw.numpy(), gz[0].numpy(), gz[1], x.grad.numpy(), w.grad


def test_autograd_grad_matches_torch():
    ours, theirs = _grad_calls(gc), _grad_calls(torch)
    for a, b in zip(ours, theirs):
        if b is None:
            assert a is None
        else:
            np.testing.assert_allclose(a, b, rtol=1e-12)


def test_autograd_grad_errors():
    for lib in (gc, torch):
        x = lib.tensor(X, requires_grad=True)
        c = lib.tensor(W)
        y = (x * 2).sum()
        with pytest.raises(RuntimeError, match="does not require grad"):
            lib.autograd.grad(y, c)
        with pytest.raises(RuntimeError, match="appears to not have been used in the graph"):
            lib.autograd.grad((x * 2).sum(), [x, lib.tensor(1.0, requires_grad=True)])
        with pytest.raises(RuntimeError, match="only for scalar outputs"):
            lib.autograd.grad(x * 2, x)
        y = (x * 2).sum()
        lib.autograd.grad(y, x)
        assert x.grad is None


def test_grad_fn_names_and_next_functions():
    for lib in (gc, torch):
        x = lib.tensor(X, requires_grad=True)
        c = lib.tensor(W)
        y = x * c
        z = y + x
        assert x.grad_fn is None and c.grad_fn is None
        assert type(y.grad_fn).__name__ == "MulBackward0" and z.grad_fn.name() == "AddBackward0"
        nxt = z.grad_fn.next_functions
        assert [type(f).__name__ for f, _ in nxt] == ["MulBackward0", "AccumulateGrad"]
        assert nxt[1][0].variable is x
        assert y.grad_fn.next_functions[1][0] is None
        assert z.grad_fn is z.grad_fn
        with lib.no_grad():
            assert (x * 2).grad_fn is None


def test_variable():
    v = gc.autograd.Variable(gc.tensor([1.0, 2.0]), requires_grad=True)
    assert isinstance(v, gc.Tensor) and v.requires_grad and isinstance(v, gc.autograd.Variable)


def test_grad_modes():
    for lib in (gc, torch):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        with lib.autograd.set_grad_enabled(False):
            assert not (x * 2).requires_grad
        assert (x * 2).requires_grad
        lib.autograd.set_grad_enabled(False)
        assert not (x * 2).requires_grad
        lib.autograd.set_grad_enabled(True)
        assert (x * 2).requires_grad
        with lib.autograd.inference_mode():
            assert not (x * 2).requires_grad
        with lib.autograd.inference_mode(False):
            assert (x * 2).requires_grad

        @lib.autograd.set_grad_enabled(False)
        def doubled(t):
            return t * 2

        assert not doubled(x).requires_grad and (x * 2).requires_grad


def test_gradcheck():
    for lib in (gc, torch):
        Legendre3 = _functions(lib)[0]

        class WrongBackward(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return x**2

            @staticmethod
            def backward(ctx, g):
                (x,) = ctx.saved_tensors
                return g * x  # (should be 2x)

        x = lib.tensor(X, requires_grad=True)
        w = lib.tensor(W.T.copy(), requires_grad=True)
        assert lib.autograd.gradcheck(Legendre3.apply, (x,))
        assert lib.autograd.gradcheck(lambda a, b: (a.tanh() @ b, a.sum()), (x, w))
        with pytest.raises(RuntimeError, match="Jacobian mismatch for output 0 with respect to input 0"):
            lib.autograd.gradcheck(WrongBackward.apply, (x,))
        assert lib.autograd.gradcheck(WrongBackward.apply, (x,), raise_exception=False) is False
