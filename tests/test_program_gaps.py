"""The names real PyTorch programs needed (tests/compat/programs: dcgan, fast_neural_style, gcn, siamese,
ViT, SWA, weight norm, ...), each against the PyTorch CPU oracle: values and gradients."""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import gradcraft as gc  # noqa: E402
import gradcraft.nn as gnn  # noqa: E402
import gradcraft.nn.functional as GF  # noqa: E402

rng = np.random.default_rng(0)


def pair(*shape):
    a = rng.normal(size=shape)
    return gc.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)


def close(ours, theirs, atol=1e-6):
    np.testing.assert_allclose(np.asarray(ours.detach().numpy()), theirs.detach().numpy(), atol=atol, rtol=1e-5)


def check(fn_gc, fn_torch, *shapes, atol=1e-6):
    """Value and gradient (of a weighted sum) of fn on float64 inputs of the shapes."""
    ours, theirs = zip(*(pair(*s) for s in shapes))
    out_g, out_t = fn_gc(*ours), fn_torch(*theirs)
    close(out_g, out_t, atol)
    w = rng.normal(size=tuple(out_t.shape))
    (out_g * gc.tensor(w)).sum().backward()
    (out_t * torch.tensor(w)).sum().backward()
    for a, b in zip(ours, theirs):
        close(a.grad, b.grad, atol)


@pytest.mark.parametrize("k", [0, 1, -2])
def test_diag_diagonal_trace(k):
    check(lambda v: gc.diag(v, k), lambda v: torch.diag(v, k), (4,))
    check(lambda m: gc.diag(m, k), lambda m: torch.diag(m, k), (4, 5))
    check(lambda m: m.diagonal(k, 0, 2), lambda m: m.diagonal(k, 0, 2), (3, 2, 4))
    check(lambda v: gc.diag_embed(v, k), lambda v: torch.diag_embed(v, k), (2, 3))
    check(lambda m: gc.trace(m), lambda m: torch.trace(m), (3, 4))
    with pytest.raises(RuntimeError):
        gc.diag(gc.zeros(2, 2, 2))


@pytest.mark.parametrize("dim,size,step", [(0, 2, 1), (1, 3, 2), (-1, 2, 2), (2, 4, 3)])
def test_tensor_unfold(dim, size, step):
    check(lambda x: x.unfold(dim, size, step), lambda x: x.unfold(dim, size, step), (5, 6, 7))
    with pytest.raises(RuntimeError):
        gc.zeros(3).unfold(0, 4, 1)


@pytest.mark.parametrize("p", [2.0, 1.0, 1.5, float("inf")])
def test_pairwise_distance_and_modules(p):
    F = torch.nn.functional
    check(lambda a, b: GF.pairwise_distance(a, b, p), lambda a, b: F.pairwise_distance(a, b, p), (4, 3), (4, 3))
    check(
        lambda a, b: GF.pairwise_distance(a, b, p, keepdim=True),
        lambda a, b: F.pairwise_distance(a, b, p, keepdim=True),
        (4, 3),
        (3,),
    )
    check(
        lambda a, b: gnn.PairwiseDistance(p, 0.0)(a, b),
        lambda a, b: torch.nn.PairwiseDistance(p, 0.0)(a, b),
        (3,),
        (3,),
    )
    check(lambda a, b: gnn.CosineSimilarity(0)(a, b), lambda a, b: torch.nn.CosineSimilarity(0)(a, b), (3, 2), (3, 2))


@pytest.mark.parametrize("p", [2.0, 1.0, 3.0])
def test_cdist(p):
    check(lambda a, b: gc.cdist(a, b, p), lambda a, b: torch.cdist(a, b, p), (2, 4, 3), (2, 5, 3), atol=1e-5)
    a = gc.tensor([[1.0, 2.0]], requires_grad=True)
    gc.cdist(a, gc.tensor([[1.0, 2.0]])).sum().backward()
    assert a.grad.tolist() == [[0.0, 0.0]]  # zero distance: zero gradient, as PyTorch


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
def test_pad_modes_and_layers(mode):
    F = torch.nn.functional
    check(lambda x: GF.pad(x, (1, 2), mode), lambda x: F.pad(x, (1, 2), mode), (2, 3, 4))
    check(lambda x: GF.pad(x, (2, 1, 1, 2), mode), lambda x: F.pad(x, (2, 1, 1, 2), mode), (1, 2, 4, 5))
    check(lambda x: GF.pad(x, (-1, 2, 0, -2)), lambda x: F.pad(x, (-1, 2, 0, -2)), (2, 4, 5))
    for name, arg in [
        ("ReflectionPad1d", 2),
        ("ReflectionPad2d", (1, 0, 2, 1)),
        ("ReplicationPad2d", 2),
        ("ReplicationPad1d", (1, 3)),
        ("CircularPad2d", 1),
        ("ZeroPad2d", (1, 2, 3, 0)),
    ]:
        ours, theirs = getattr(gnn, name)(arg), getattr(torch.nn, name)(arg)
        assert repr(ours) == repr(theirs)
        shape = (2, 5) if name.endswith("1d") else (1, 2, 4, 5)
        check(ours, theirs, shape)
    ours, theirs = gnn.ConstantPad2d(1, 3.5), torch.nn.ConstantPad2d(1, 3.5)
    assert repr(ours) == repr(theirs)
    check(ours, theirs, (1, 1, 2, 3))
    with pytest.raises(RuntimeError):
        GF.pad(gc.zeros(1, 2, 3), (3, 0), "reflect")


@pytest.mark.parametrize("affine,track", [(False, False), (True, False), (True, True)])
def test_instance_norm(affine, track):
    for dims, ours_cls, torch_cls in [
        (1, gnn.InstanceNorm1d, torch.nn.InstanceNorm1d),
        (2, gnn.InstanceNorm2d, torch.nn.InstanceNorm2d),
    ]:
        ours = ours_cls(3, affine=affine, track_running_stats=track).double()
        theirs = torch_cls(3, affine=affine, track_running_stats=track).double()
        assert repr(ours) == repr(theirs)
        if affine:
            w, b = rng.normal(size=3), rng.normal(size=3)
            with torch.no_grad():
                theirs.weight.copy_(torch.tensor(w))
                theirs.bias.copy_(torch.tensor(b))
            ours.weight.data = gc.tensor(w)
            ours.bias.data = gc.tensor(b)
        shape = (2, 3) + (4,) * dims
        check(ours, theirs, shape)
        check(ours, theirs, shape[1:])  # unbatched
        if track:
            close(ours.running_mean, theirs.running_mean)
            close(ours.running_var, theirs.running_var)
            ours.eval()
            theirs.eval()
            check(ours, theirs, shape)
        assert sorted(ours.state_dict()) == sorted(theirs.state_dict())


def test_range_index():
    x = np.arange(12.0).reshape(3, 4)
    ours, theirs = gc.tensor(x), torch.tensor(x)
    close(ours[range(3), [1, 0, 3]], theirs[range(3), [1, 0, 3]])
    ours[range(3), [0, 1, 2]] = 9.0
    theirs[range(3), [0, 1, 2]] = 9.0
    close(ours, theirs)


def lrs(scheduler, steps, arg=None):
    out = []
    for i in range(steps):
        scheduler.optimizer.step()
        scheduler.step() if arg is None else scheduler.step(arg(i))
        out.append(scheduler.get_last_lr()[0])
    return out


def both(make_sched, opt_name="SGD", **opt_kw):
    results = []
    for lib in (gc, torch):
        opt = getattr(lib.optim, opt_name)([lib.zeros(2, requires_grad=True)], **opt_kw)
        sched = make_sched(lib.optim.lr_scheduler, opt)
        results.append((sched, opt))
    return results


@pytest.mark.parametrize(
    "make,steps,arg",
    [
        (lambda S, o: S.CosineAnnealingWarmRestarts(o, T_0=3, T_mult=2, eta_min=0.01), 15, None),
        (lambda S, o: S.CosineAnnealingWarmRestarts(o, T_0=2), 10, lambda i: i * 0.7),
        (lambda S, o: S.CosineAnnealingWarmRestarts(o, T_0=2, T_mult=3), 10, lambda i: i * 0.9),
        (lambda S, o: S.CyclicLR(o, 0.01, 0.1, step_size_up=3, mode="triangular2"), 15, None),
        (
            lambda S, o: S.CyclicLR(o, 0.01, 0.1, step_size_up=2, step_size_down=3, mode="exp_range", gamma=0.9),
            15,
            None,
        ),
        (lambda S, o: S.CyclicLR(o, 0.01, 0.1, 2, scale_fn=lambda x: 0.5**x, scale_mode="iterations"), 9, None),
        (lambda S, o: S.ChainedScheduler([S.ConstantLR(o, 0.5, 3), S.ExponentialLR(o, 0.9)]), 6, None),
        (lambda S, o: S.ChainedScheduler([S.StepLR(o, 2, 0.5), S.LinearLR(o, 0.2, 1.0, 4)]), 7, None),
    ],
)
def test_schedulers(make, steps, arg):
    (ours, opt_g), (theirs, opt_t) = both(make, lr=0.1, momentum=0.9)
    np.testing.assert_allclose(lrs(ours, steps, arg), lrs(theirs, steps, arg), rtol=1e-9, atol=1e-12)
    assert opt_g.param_groups[0]["momentum"] == pytest.approx(opt_t.param_groups[0]["momentum"])


def test_scheduler_errors():
    opt = gc.optim.SGD([gc.zeros(1, requires_grad=True)], lr=0.1)
    for bad in (dict(T_0=0), dict(T_0=2, T_mult=0), dict(T_0=1.5)):
        with pytest.raises(ValueError):
            gc.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, **bad)
    with pytest.raises(ValueError):
        gc.optim.lr_scheduler.CyclicLR(opt, 0.1, 1.0, mode="nope")
    with pytest.raises(ValueError):
        gc.optim.lr_scheduler.CyclicLR(gc.optim.Adagrad([gc.zeros(1, requires_grad=True)]), 0.1, 1.0)


@pytest.mark.parametrize(
    "name,args",
    [
        ("Adam", (0.05, (0.8, 0.9), 1e-6, 0.1, True)),
        ("RMSprop", (0.02, 0.9, 1e-7, 0.1, 0.5, True)),
        ("Adagrad", (0.1, 0.01, 0.1, 0.2, 1e-9)),
    ],
)
def test_optimizers_take_positional_hyperparameters(name, args):
    w = rng.normal(size=(3,))
    ours, theirs = gc.tensor(w, requires_grad=True), torch.tensor(w, requires_grad=True)
    opt_g, opt_t = getattr(gc.optim, name)([ours], *args), getattr(torch.optim, name)([theirs], *args)
    for _ in range(3):
        for p, opt in ((ours, opt_g), (theirs, opt_t)):
            opt.zero_grad()
            (p * p * p).sum().backward()
            opt.step()
    close(ours, theirs, 1e-6)
    with pytest.raises(ValueError):
        getattr(gc.optim, name)([ours], -1.0)


def test_swa_utils_against_torch():
    from torch.optim.swa_utils import (
        SWALR as TSWALR,
        AveragedModel as TAvg,
        get_ema_multi_avg_fn as tema,
        update_bn as tbn,
    )

    from gradcraft.optim.swa_utils import SWALR, AveragedModel, get_ema_multi_avg_fn, update_bn

    x = rng.normal(size=(16, 3))
    results = []
    for lib, Avg, SW, ema, ubn in (
        (gc, AveragedModel, SWALR, get_ema_multi_avg_fn, update_bn),
        (torch, TAvg, TSWALR, tema, tbn),
    ):
        model = lib.nn.Sequential(
            lib.nn.Linear(3, 4), lib.nn.BatchNorm1d(4), lib.nn.ReLU(), lib.nn.Linear(4, 1)
        ).double()
        with lib.no_grad():
            for p in model.parameters():
                p.copy_(lib.tensor(np.linspace(-1, 1, p.numel()).reshape(tuple(p.shape))))
        opt = lib.optim.SGD(model.parameters(), lr=0.1)
        swa, emam = Avg(model), Avg(model, multi_avg_fn=ema(0.8))
        sched = SW(opt, swa_lr=0.02, anneal_epochs=3, anneal_strategy="cos")
        data = lib.tensor(x)
        lrs_seen = []
        for step in range(5):
            opt.zero_grad()
            model(data).pow(2).mean().backward()
            opt.step()
            swa.update_parameters(model)
            emam.update_parameters(model)
            sched.step()
            lrs_seen.append(opt.param_groups[0]["lr"])
        ubn([(data[:8],), (data[8:],)], swa)
        results.append(
            (
                lrs_seen,
                [p.detach().numpy() for p in swa.parameters()],
                [p.detach().numpy() for p in emam.parameters()],
                swa.module[1].running_var.numpy(),
                int(swa.n_averaged),
            )
        )
    ours, theirs = results
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-12)
    for a, b in zip(ours[1] + ours[2], theirs[1] + theirs[2]):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(ours[3], theirs[3], rtol=1e-9)
    assert ours[4] == theirs[4] == 5


@pytest.mark.parametrize("dim", [0, 1, None, -1])
def test_weight_norm_both_forms(dim):
    w = rng.normal(size=(3, 4, 2))
    for new in (False, True):
        conv_g, conv_t = gnn.Conv1d(4, 3, 2).double(), torch.nn.Conv1d(4, 3, 2).double()
        with torch.no_grad():
            conv_t.weight.copy_(torch.tensor(w))
            conv_t.bias.zero_()
        conv_g.weight.data = gc.tensor(w)
        conv_g.bias.data = gc.zeros(3, dtype=gc.float64)
        if new:
            conv_g = gc.nn.utils.parametrizations.weight_norm(conv_g, dim=dim)
            conv_t = torch.nn.utils.parametrizations.weight_norm(conv_t, dim=dim)
            g_g, g_t = conv_g.parametrizations.weight.original0, conv_t.parametrizations.weight.original0
            v_g, v_t = conv_g.parametrizations.weight.original1, conv_t.parametrizations.weight.original1
        else:
            conv_g = gc.nn.utils.weight_norm(conv_g, dim=dim)
            with pytest.warns(FutureWarning):
                conv_t = torch.nn.utils.weight_norm(conv_t, dim=dim)
            g_g, g_t, v_g, v_t = conv_g.weight_g, conv_t.weight_g, conv_g.weight_v, conv_t.weight_v
        assert list(conv_g.state_dict()) == list(conv_t.state_dict())
        close(g_g, g_t)
        x = rng.normal(size=(2, 4, 5))
        conv_g(gc.tensor(x)).pow(2).sum().backward()
        conv_t(torch.tensor(x)).pow(2).sum().backward()
        close(g_g.grad, g_t.grad)
        close(v_g.grad, v_t.grad)
        if new:
            gc.nn.utils.parametrize.remove_parametrizations(conv_g, "weight")
            torch.nn.utils.parametrize.remove_parametrizations(conv_t, "weight")
        else:
            gc.nn.utils.remove_weight_norm(conv_g)
            torch.nn.utils.remove_weight_norm(conv_t)
        assert type(conv_g) is gnn.Conv1d
        assert list(conv_g.state_dict()) == list(conv_t.state_dict())
        close(conv_g.weight, conv_t.weight)


def test_register_parametrization_symmetric():
    import gradcraft.nn.utils.parametrize as P

    class Symmetric(gnn.Module):
        def forward(self, X):
            return X.triu() + X.triu(1).transpose(-1, -2)

    layer = gnn.Linear(3, 3)
    P.register_parametrization(layer, "weight", Symmetric())
    assert type(layer).__name__ == "ParametrizedLinear" and isinstance(layer, gnn.Linear)
    assert P.is_parametrized(layer) and P.is_parametrized(layer, "weight") and not P.is_parametrized(layer, "bias")
    W = layer.weight.numpy()
    np.testing.assert_array_equal(W, W.T)
    assert "parametrizations.weight.original" in layer.state_dict()
    assert type(gnn.Linear(2, 2)) is gnn.Linear  # other instances untouched
    with pytest.raises(ValueError):
        P.register_parametrization(layer, "nothing", Symmetric())
    with pytest.raises(RuntimeError):
        layer.weight = gc.zeros(3, 3)  # no right_inverse
    P.remove_parametrizations(layer, "weight")
    assert type(layer) is gnn.Linear and not P.is_parametrized(layer)
    np.testing.assert_array_equal(layer.weight.numpy(), W)


ACTIVATIONS = [
    ("relu6", {}),
    ("hardtanh", {"min_val": -0.5, "max_val": 2.0}),
    ("hardsigmoid", {}),
    ("hardswish", {}),
    ("mish", {}),
    ("softsign", {}),
    ("logsigmoid", {}),
    ("softmin", {"dim": 1}),
    ("selu", {}),
    ("celu", {"alpha": 0.7}),
    ("tanhshrink", {}),
    ("softshrink", {"lambd": 0.4}),
    ("hardshrink", {"lambd": 0.4}),
    ("threshold", {"threshold": 0.2, "value": -2.0}),
]


@pytest.mark.parametrize("name,kw", ACTIVATIONS)
def test_activation_functions(name, kw):
    # the kinks themselves (-3, 0, 3, 6, +-lambd) are among the inputs: PyTorch's gradients there too
    a = np.concatenate([rng.normal(scale=4, size=30), [-3.0, 0.0, 3.0, 6.0, 0.4, -0.4, -0.5, 2.0, 0.2, 40.0, -40.0]])
    a = np.stack([a, -a], 1)
    ours, theirs = gc.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    out_g, out_t = getattr(GF, name)(ours, **kw), getattr(torch.nn.functional, name)(theirs, **kw)
    close(out_g, out_t, 1e-9)
    out_g.sum().backward()
    out_t.sum().backward()
    close(ours.grad, theirs.grad, 1e-9)


@pytest.mark.parametrize(
    "name,kw",
    [
        a
        for a in ACTIVATIONS
        if a[0] in ("relu6", "hardtanh", "hardsigmoid", "hardswish", "mish", "selu", "celu", "threshold")
    ],
)
def test_activation_inplace_in_graph(name, kw):
    a = rng.normal(scale=3, size=(4, 5))
    results = []
    for lib, F in ((gc, GF), (torch, torch.nn.functional)):
        x = lib.tensor(a, requires_grad=True)
        h = x * 2.0
        y = getattr(F, name)(h, inplace=True, **kw)
        assert y is h
        (y * y).sum().backward()
        results.append((y.detach().numpy(), x.grad.numpy()))
    np.testing.assert_allclose(results[0][0], results[1][0], atol=1e-9)
    np.testing.assert_allclose(results[0][1], results[1][1], atol=1e-9)


def test_activation_modules_repr_and_values():
    mods = [
        ("ReLU6", (True,)),
        ("Hardtanh", (-2.0, 2.0)),
        ("Hardsigmoid", ()),
        ("Hardswish", (True,)),
        ("Mish", ()),
        ("Softsign", ()),
        ("LogSigmoid", ()),
        ("Softmin", (0,)),
        ("SELU", ()),
        ("CELU", (2.0,)),
        ("Tanhshrink", ()),
        ("Softshrink", (0.2,)),
        ("Hardshrink", ()),
        ("Threshold", (0.1, 20.0)),
    ]
    a = rng.normal(scale=3, size=(3, 4))
    for name, args in mods:
        ours, theirs = getattr(gnn, name)(*args), getattr(torch.nn, name)(*args)
        assert repr(ours) == repr(theirs)
        close(ours(gc.tensor(a)), theirs(torch.tensor(a)), 1e-9)
    with pytest.warns(UserWarning):
        close(gnn.Softmin()(gc.tensor(a)), torch.nn.Softmin()(torch.tensor(a)), 1e-9)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_log1p_expm1(dtype):
    a = np.array([-0.9, -1e-5, -1e-12, 0.0, 1e-12, 1e-7, 3e-4, 0.5, 2.0, 80.0, 1e30], dtype=dtype)
    for name, values in (("log1p", a), ("expm1", np.concatenate([a[:-1], [-200.0, 5.0]]).astype(dtype))):
        ours = gc.tensor(values, requires_grad=True)
        theirs = torch.tensor(values, requires_grad=True)
        out_g, out_t = getattr(gc, name)(ours), getattr(ours, name)()
        ref = getattr(torch, name)(theirs)
        np.testing.assert_allclose(out_g.detach().numpy(), ref.detach().numpy(), rtol=4 * np.finfo(dtype).eps)
        close(out_t, ref, 0)
        out_g.sum().backward()
        ref.sum().backward()
        np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=4 * np.finfo(dtype).eps)


@pytest.mark.parametrize(
    "fn",
    [
        lambda L, x: L.roll(x, 2, 1),
        lambda L, x: L.roll(x, (-1, 5), (0, 2)),
        lambda L, x: x.roll(3),
        lambda L, x: L.movedim(x, 0, -1),
        lambda L, x: x.movedim((0, 1), (2, 0)),
        lambda L, x: L.moveaxis(x, 2, 0),
        lambda L, x: L.broadcast_to(x[:, :1], (3, 4, 5)),
        lambda L, x: L.cumprod(x, 1),
        lambda L, x: x.cumprod(-1),
        lambda L, x: L.log2(x.abs() + 0.1),
        lambda L, x: (x.abs() + 0.1).log10(),
        lambda L, x: L.clamp_min(x, -0.2) + L.clamp_max(x, 0.3),
        lambda L, x: L.hstack([x[0], x[1]]) + L.vstack([x[0, 0], x[1, 1], x[2, 2]]).sum(),
        lambda L, x: L.hstack([x[0, 0], x[1, 1]]),
        lambda L, x: L.addmm(x[0, :, 0], x[0], x[1].T, beta=0.5, alpha=2.0),
        lambda L, x: x[0, :, :4].addmm(x[0], x[1].T),
        lambda L, x: L.baddbmm(x[:, :1, :], x[:, :, :3], x[:, :3, :], alpha=0.5),
        lambda L, x: L.masked_select(x, x > 0.3),
        lambda L, x: x.masked_select((x[0] > 0)[None]),
    ],
)
def test_tensor_extras(fn):
    check(lambda x: fn(gc, x), lambda x: fn(torch, x), (3, 4, 5))


def test_tensor_extras_exact():
    for args in [(4, 4), (3, 5, 1), (5, 3, -1), (4, 6, 3)]:
        for name in ("tril_indices", "triu_indices"):
            ours, theirs = getattr(gc, name)(*args), getattr(torch, name)(*args)
            assert ours.tolist() == theirs.tolist() and ours.dtype == gc.int64
    x = np.array([[1.0, 0.0, 2.0], [-1.0, 3.0, 0.5]])
    assert gc.cumprod(gc.tensor(x), 1).tolist() == torch.cumprod(torch.tensor(x), 1).tolist()
    ints = np.array([1, 2, 3, 4, 5])
    assert gc.cumprod(gc.tensor(ints), 0).tolist() == [1, 2, 6, 24, 120]
    nan = gc.tensor([[float("nan"), 1.0]])
    assert gc.addmm(nan, gc.ones(1, 2), gc.ones(2, 2), beta=0).tolist() == [[2.0, 2.0]]
    with pytest.raises(RuntimeError):
        gc.roll(gc.zeros(2, 2), (1, 1), 0)
    with pytest.raises(RuntimeError):
        gc.masked_select(gc.zeros(2), gc.zeros(2))


@pytest.mark.parametrize("amsgrad,maximize", [(True, False), (False, True), (True, True)])
def test_adamw_amsgrad_maximize(amsgrad, maximize):
    w = rng.normal(size=(4, 3)).astype(np.float32)
    ours, theirs = gc.tensor(w, requires_grad=True), torch.tensor(w, requires_grad=True)
    kw = dict(lr=0.05, weight_decay=0.1, amsgrad=amsgrad, maximize=maximize)
    opt_g, opt_t = gc.optim.AdamW([ours], **kw), torch.optim.AdamW([theirs], **kw)
    for step in range(5):
        for p, opt in ((ours, opt_g), (theirs, opt_t)):
            opt.zero_grad()
            ((p - 0.3 * step) ** 2).sum().backward()
            opt.step()
    close(ours, theirs, 1e-5)
    if amsgrad:
        close(opt_g.state[ours]["max_exp_avg_sq"], opt_t.state[theirs]["max_exp_avg_sq"], 1e-6)


def test_index_fill():
    check(
        lambda x: gc.index_fill(x, 1, gc.tensor([0, 2, -1]), -1.5),
        lambda x: torch.index_fill(x, 1, torch.tensor([0, 2, -1]), -1.5),
        (3, 4, 5),
    )
    check(lambda x: x.index_fill(0, gc.tensor(1), 0.0), lambda x: x.index_fill(0, torch.tensor(1), 0.0), (3, 2))
    # a 0-d tensor value gets the gradient of the filled positions
    v_g, v_t = gc.tensor(2.0, requires_grad=True), torch.tensor(2.0, requires_grad=True)
    x = rng.normal(size=(3, 4))
    (gc.tensor(x).index_fill(1, gc.tensor([1, 3]), v_g) * gc.tensor(x)).sum().backward()
    (torch.tensor(x).index_fill(1, torch.tensor([1, 3]), v_t) * torch.tensor(x)).sum().backward()
    close(v_g.grad, v_t.grad)
    a, b = gc.tensor(x), torch.tensor(x)
    assert a.index_fill_(0, gc.tensor([2]), 7.0) is a
    b.index_fill_(0, torch.tensor([2]), 7.0)
    close(a, b)
    with pytest.raises(IndexError):
        a.index_fill_(0, gc.tensor([3]), 1.0)
    with pytest.raises(RuntimeError):
        a.index_fill(0, gc.tensor([0.0]), 1.0)


def test_erf_erfc():
    a = np.concatenate([np.linspace(-4, 4, 41), [0.0, 1e-4, -30.0, 30.0]])
    for name in ("erf", "erfc"):
        ours, theirs = gc.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
        out_g, out_t = getattr(gc, name)(ours), getattr(torch, name)(theirs)
        close(out_g, out_t, 2e-7)  # (the approximation's documented error)
        close(getattr(gc.tensor(a), name)(), out_t, 2e-7)
        out_g.sum().backward()
        out_t.sum().backward()
        close(ours.grad, theirs.grad, 1e-12)
    x = gc.tensor([0.3, -1.2])
    gelu = 0.5 * x * (1 + gc.erf(x / math.sqrt(2)))
    np.testing.assert_allclose(gelu.numpy(), torch.nn.functional.gelu(torch.tensor([0.3, -1.2])).numpy(), atol=1e-6)


def test_where_one_argument_and_runtime_switches():
    x = rng.normal(size=(3, 4))
    ours, theirs = gc.where(gc.tensor(x) > 0), torch.where(torch.tensor(x) > 0)
    assert [t.tolist() for t in ours] == [t.tolist() for t in theirs]
    close(gc.where(gc.tensor(x) > 0, gc.tensor(x), 0.0), torch.where(torch.tensor(x) > 0, torch.tensor(x), 0.0))
    with pytest.raises(TypeError):
        gc.where(gc.tensor(x) > 0, gc.tensor(x))
    before = gc.get_num_threads()
    try:
        gc.set_num_threads(1)
        assert gc.get_num_threads() == 1
        close(gc.tensor(x).exp().sum(), torch.tensor(x).exp().sum())
    finally:
        gc.set_num_threads(before)
    assert gc.get_num_threads() == before
    gc.use_deterministic_algorithms(True, warn_only=True)
    assert gc.are_deterministic_algorithms_enabled() and gc.is_deterministic_algorithms_warn_only_enabled()
    gc.use_deterministic_algorithms(False)
    assert not gc.are_deterministic_algorithms_enabled()


def test_unique():
    x = np.array([[3, 1, 2, 3], [1, 1, 5, 2], [3, 1, 2, 3]])
    for kw in ({}, {"return_inverse": True}, {"return_counts": True}, {"return_inverse": True, "return_counts": True}):
        for dim in (None, 0, 1):
            ours = gc.unique(gc.tensor(x), dim=dim, **kw)
            theirs = torch.unique(torch.tensor(x), dim=dim, **kw)
            ours, theirs = (ours, theirs) if isinstance(theirs, tuple) else ((ours,), (theirs,))
            assert [o.tolist() for o in ours] == [t.tolist() for t in theirs], (kw, dim)
            ours = gc.unique_consecutive(gc.tensor(x), dim=dim, **kw)
            theirs = torch.unique_consecutive(torch.tensor(x), dim=dim, **kw)
            ours, theirs = (ours, theirs) if isinstance(theirs, tuple) else ((ours,), (theirs,))
            assert [o.tolist() for o in ours] == [t.tolist() for t in theirs], (kw, dim)
    f = gc.tensor([0.5, -1.0, 0.5, 2.0])
    assert f.unique().tolist() == [-1.0, 0.5, 2.0] and f.unique().dtype == gc.float32


@pytest.mark.parametrize(
    "fn",
    [
        lambda L, t: L.linalg.norm(t),
        lambda L, t: L.linalg.norm(t, dim=1),
        lambda L, t: L.linalg.norm(t[0], -1),
        lambda L, t: L.linalg.norm(t, dim=(0, 2)),
        lambda L, t: L.linalg.vector_norm(t, 1, (0, 2), True),
        lambda L, t: L.linalg.vector_norm(t, float("inf"), -1),
        lambda L, t: L.linalg.vector_norm(t, 3.0),
        lambda L, t: L.linalg.matrix_norm(t),
        lambda L, t: L.linalg.matrix_norm(t, 1),
        lambda L, t: L.linalg.matrix_norm(t, -float("inf"), keepdim=True),
    ],
)
def test_linalg_norms(fn):
    check(lambda x: fn(gc, x), lambda x: fn(torch, x), (2, 3, 4))


def test_linalg_module_import():
    import gradcraft.linalg as gl

    assert gl is gc.linalg
    with pytest.raises(gc.UserError):
        gc.linalg.matrix_norm(gc.ones(2, 2), "nuc")


@pytest.mark.parametrize(
    "fn",
    [
        lambda L, t: L.median(t),
        lambda L, t: L.median(t, 1).values,
        lambda L, t: t.median(dim=-1, keepdim=True).values,
        lambda L, t: L.quantile(t, 0.3),
        lambda L, t: L.quantile(t, 0.75, dim=1, keepdim=True),
        lambda L, t: t.quantile(L.tensor([0.1, 0.5, 0.9], dtype=t.dtype), dim=-1),
        lambda L, t: L.quantile(t, 0.4, dim=0, interpolation="lower"),
        lambda L, t: L.quantile(t, 0.4, dim=0, interpolation="higher"),
        lambda L, t: L.quantile(t, 0.4, dim=2, interpolation="midpoint"),
        lambda L, t: L.quantile(t, 0.5, dim=2, interpolation="nearest"),
        lambda L, t: L.quantile(t, 0.625, dim=2, interpolation="nearest"),
    ],
)
def test_median_quantile(fn):
    check(lambda x: fn(gc, x), lambda x: fn(torch, x), (3, 4, 5))


def test_median_indices_and_nan():
    x = np.array([[3.0, 1.0, 2.0, 1.0], [0.0, np.nan, 4.0, np.nan]])
    ours, theirs = gc.median(gc.tensor(x), 1), torch.median(torch.tensor(x), 1)
    np.testing.assert_array_equal(ours.values.numpy(), theirs.values.numpy())
    assert ours.indices.tolist()[1] == theirs.indices.tolist()[1] == 1
    assert np.isnan(gc.median(gc.tensor(x)).item()) and np.isnan(gc.quantile(gc.tensor(x), 0.5).item())
    y = gc.tensor([[5.0, 1.0, 3.0]])
    assert gc.median(y, 1).indices.tolist() == [2]
    with pytest.raises(RuntimeError):
        gc.quantile(gc.tensor([1.0]), 1.5)


def test_set_printoptions():
    import gradcraft.printoptions as po

    x = np.array([1 / 3, 2 / 3, 12.5])
    try:
        for kw in ({"precision": 2}, {"profile": "short"}, {"precision": 3, "sci_mode": False}):
            gc.set_printoptions(**kw)
            torch.set_printoptions(**kw)
            ours, theirs = repr(gc.tensor(x)), repr(torch.tensor(x))
            assert ours.split("dtype")[0].replace(" ", "").rstrip(",") == theirs.split("dtype")[0].replace(
                " ", ""
            ).rstrip(",")
        gc.set_printoptions(threshold=5, edgeitems=2)
        assert "..." in repr(gc.arange(10))
        with pytest.raises(ValueError):
            gc.set_printoptions(profile="nope")
    finally:
        po.options.clear()
        torch.set_printoptions(profile="default")
    assert repr(gc.tensor([1 / 3])) == "tensor([0.33333334], dtype=float32)"
