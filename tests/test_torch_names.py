"""The everyday torch / torch.nn / torch.optim names, each checked against PyTorch:
optimizers and schedulers step for step, gc.save/gc.load, print(model), buffers, clipping and the
small tensor helpers."""

import io

import numpy as np
import pytest
import torch

import gradcraft as gc
import gradcraft.nn as gnn
import gradcraft.nn.functional as gF


def _models(seed=0):
    """The same tiny MLP in both libraries, with the same weights."""
    rng = np.random.default_rng(seed)
    shapes = [(5, 3), (5,), (2, 5), (2,)]
    values = [rng.standard_normal(s) * 0.5 for s in shapes]
    g = gnn.Sequential(gnn.Linear(3, 5), gnn.Tanh(), gnn.Linear(5, 2))
    t = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2)).double()
    g.double()
    with gc.no_grad(), torch.no_grad():
        for pg, pt, v in zip(g.parameters(), t.parameters(), values):
            pg.copy_(gc.tensor(v))
            pt.copy_(torch.tensor(v))
    return g, t


def _train(lib, model, opt, sched=None, steps=6):
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((8, 3)), rng.standard_normal((8, 2))
    lrs = []
    for _ in range(steps):
        opt.zero_grad()
        loss = ((model(lib.tensor(x)) - lib.tensor(y)) ** 2).mean()
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()
            lrs.append(sched.get_last_lr()[0])
    return [p.detach().numpy() for p in model.parameters()], lrs


OPTIMIZERS = [
    ("Adam", {"lr": 0.05}),
    ("Adam", {"lr": 0.05, "weight_decay": 0.1, "amsgrad": True}),
    ("Adam", {"lr": 0.05, "betas": (0.8, 0.9)}),
    ("RMSprop", {"lr": 0.01}),
    ("RMSprop", {"lr": 0.01, "momentum": 0.9, "centered": True, "weight_decay": 0.01}),
    ("Adagrad", {"lr": 0.1, "lr_decay": 0.01}),
    ("SGD", {"lr": 0.1}),
    ("SGD", {"lr": 0.1, "momentum": 0.9}),
    ("SGD", {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 0.01}),
    ("SGD", {"lr": 0.1, "momentum": 0.9, "dampening": 0.5}),
]


@pytest.mark.parametrize("name,kwargs", OPTIMIZERS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(OPTIMIZERS)])
def test_optimizer_matches_torch(name, kwargs):
    g, t = _models()
    got, _ = _train(gc, g, getattr(gc.optim, name)(g.parameters(), **kwargs))
    expected, _ = _train(torch, t, getattr(torch.optim, name)(t.parameters(), **kwargs))
    for a, b in zip(got, expected):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)


SCHEDULERS = [
    ("StepLR", {"step_size": 2, "gamma": 0.5}),
    ("MultiStepLR", {"milestones": [1, 4], "gamma": 0.3}),
    ("ExponentialLR", {"gamma": 0.9}),
    ("CosineAnnealingLR", {"T_max": 4, "eta_min": 0.001}),
    ("LinearLR", {"start_factor": 0.25, "total_iters": 3}),
    ("ConstantLR", {"factor": 0.5, "total_iters": 2}),
    ("LambdaLR", {"lr_lambda": lambda s: 1.0 / (s + 1)}),
    ("PolynomialLR", {"total_iters": 5, "power": 2.0}),
    ("OneCycleLR", {"max_lr": 0.2, "total_steps": 10}),
    ("OneCycleLR", {"max_lr": 0.2, "total_steps": 10, "three_phase": True, "anneal_strategy": "linear"}),
]


@pytest.mark.parametrize("name,kwargs", SCHEDULERS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(SCHEDULERS)])
@pytest.mark.parametrize("optimizer", ["SGD", "Adam"])
def test_scheduler_matches_torch(name, kwargs, optimizer):
    g, t = _models()
    extra = {"momentum": 0.9} if optimizer == "SGD" else {}
    g_opt = getattr(gc.optim, optimizer)(g.parameters(), lr=0.1, **extra)
    t_opt = getattr(torch.optim, optimizer)(t.parameters(), lr=0.1, **extra)
    got, g_lrs = _train(gc, g, g_opt, getattr(gc.optim.lr_scheduler, name)(g_opt, **kwargs), steps=9)
    expected, t_lrs = _train(torch, t, t_opt, getattr(torch.optim.lr_scheduler, name)(t_opt, **kwargs), steps=9)
    np.testing.assert_allclose(g_lrs, t_lrs, rtol=1e-12)
    for a, b in zip(got, expected):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)


def test_sequential_lr_and_plateau_match_torch():
    lrs = []
    for lib in (gc, torch):
        opt = lib.optim.SGD([lib.zeros(2, requires_grad=True)], lr=0.5)
        warm = lib.optim.lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=3)
        decay = lib.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=5)
        seq = lib.optim.lr_scheduler.SequentialLR(opt, [warm, decay], milestones=[3])
        out = [seq.get_last_lr()[0]]
        for _ in range(8):
            opt.step()
            seq.step()
            out.append(seq.get_last_lr()[0])
        plateau_opt = lib.optim.SGD([lib.zeros(2, requires_grad=True)], lr=1.0)
        plateau = lib.optim.lr_scheduler.ReduceLROnPlateau(plateau_opt, patience=1, factor=0.5)
        for metric in [5, 4, 4, 4, 4, 3, 3, 3, 3]:
            plateau.step(metric)
            out.append(plateau_opt.param_groups[0]["lr"])
        lrs.append(out)
    np.testing.assert_allclose(lrs[0], lrs[1], rtol=1e-12)


def test_clip_grad_norm_and_value_match_torch():
    for norm_type in (2.0, 1.0, float("inf")):
        g, t = _models()
        results = []
        for lib, model in ((gc, g), (torch, t)):
            ((model(lib.ones(4, 3, dtype=lib.float64)) * 3) ** 2).sum().backward()
            total = lib.nn.utils.clip_grad_norm_(model.parameters(), 0.5, norm_type=norm_type)
            results.append([float(total)] + [p.grad.numpy() for p in model.parameters()])
        for a, b in zip(*results):
            np.testing.assert_allclose(a, b, rtol=1e-9)
    g, t = _models()
    for lib, model in ((gc, g), (torch, t)):
        (model(lib.ones(4, 3, dtype=lib.float64)) ** 2).sum().backward()
        lib.nn.utils.clip_grad_value_(model.parameters(), 0.1)
    for a, b in zip(g.parameters(), t.parameters()):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy())


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("max_norm", [0.5, 1e9, 0.0])
def test_clip_grad_norm_scales_in_place_as_torch_does(dtype, max_norm):
    """The multi-tensor path (float32/bf16 gradients): the gradients' own tensors are scaled (a
    reference taken before sees it), the norm has their dtype, max_norm 0 zeroes them, as PyTorch's."""
    r = np.random.default_rng(0)
    data = [r.standard_normal(shape).astype(np.float32) * 3 for shape in ((3, 4), (70000,), (5,))]
    results = []
    for lib in (gc, torch):
        params = [lib.tensor(d).to(getattr(lib, dtype)).requires_grad_() for d in data]
        for p in params:
            p.grad = p.detach() * 2
        held = params[1].grad
        total = lib.nn.utils.clip_grad_norm_(params, max_norm)
        assert total.dtype == getattr(lib, dtype) and held is params[1].grad
        results.append([total.float().numpy()] + [p.grad.float().numpy() for p in params] + [held.float().numpy()])
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-5 if dtype == "float32" else 1e-2, atol=1e-6)


@pytest.mark.parametrize("norm_type", [2.0, float("inf")])
def test_clip_grad_norm_error_if_nonfinite(norm_type):
    for lib in (gc, torch):
        p = lib.tensor([1.0, 2.0], requires_grad=True)
        p.grad = lib.tensor([1.0, float("nan") if norm_type == 2.0 else float("inf")])
        with pytest.raises(RuntimeError, match="non-finite"):
            lib.nn.utils.clip_grad_norm_([p], 1.0, norm_type=norm_type, error_if_nonfinite=True)
        lib.nn.utils.clip_grad_norm_([p], 1.0, norm_type=norm_type)  # scaled by it anyway, no error


class _Net(gnn.Module):
    def __init__(self):
        super().__init__()
        self.embed = gnn.Embedding(10, 4)
        self.blocks = gnn.ModuleList([gnn.Linear(4, 4) for _ in range(3)])
        self.head = gnn.Sequential(gnn.LayerNorm(4), gnn.GELU(), gnn.Dropout(0.1), gnn.Linear(4, 2, bias=False))
        self.act = gnn.LeakyReLU(0.2)
        self.register_buffer("scale", gc.ones(4))
        self.register_buffer("cache", gc.zeros(2), persistent=False)


class _TorchNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(10, 4)
        self.blocks = torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(3)])
        self.head = torch.nn.Sequential(
            torch.nn.LayerNorm(4), torch.nn.GELU(), torch.nn.Dropout(0.1), torch.nn.Linear(4, 2, bias=False)
        )
        self.act = torch.nn.LeakyReLU(0.2)
        self.register_buffer("scale", torch.ones(4))
        self.register_buffer("cache", torch.zeros(2), persistent=False)


def test_print_model_and_state_dict_keys_match_torch():
    g, t = _Net(), _TorchNet()
    assert repr(g).replace("_Net", "Net") == repr(t).replace("_TorchNet", "Net")
    assert list(g.state_dict()) == list(t.state_dict())
    assert [n for n, _ in g.named_buffers()] == [n for n, _ in t.named_buffers()]
    assert next(g.parameters()).shape == tuple(next(t.parameters()).shape)
    for module in (
        gnn.Softmax(dim=1),
        gnn.LogSoftmax(dim=-1),
        gnn.Flatten(),
        gnn.ReLU(),
        gnn.SiLU(),
        gnn.Identity(),
        gnn.CrossEntropyLoss(),
        gnn.MSELoss(),
        gnn.ELU(alpha=0.5),
        gnn.Softplus(beta=2.0),
    ):
        assert repr(module) == repr(getattr(torch.nn, type(module).__name__)(**_same_args(module)))


def _same_args(module):
    return {k: v for k, v in vars(module).items() if k in ("dim", "alpha", "beta", "threshold")}


def test_save_and_load_round_trip(tmp_path):
    g, _ = _models()
    opt = gc.optim.Adam(g.parameters(), lr=0.01)
    _train(gc, g, opt, steps=2)
    state = {
        "model": g.state_dict(),
        "opt": opt.state_dict(),
        "step": 2,
        "name": "mlp",
        "pair": (1, 2.5),
        "half": gc.ones(3, dtype=gc.bfloat16) * 1.5,
        "ints": gc.arange(4),
        "none": None,
    }
    gc.save(state, tmp_path / "ckpt.pt")
    loaded = gc.load(tmp_path / "ckpt.pt")
    assert loaded["step"] == 2 and loaded["name"] == "mlp" and loaded["pair"] == (1, 2.5) and loaded["none"] is None
    assert loaded["half"].dtype == gc.bfloat16 and loaded["half"].tolist() == [1.5, 1.5, 1.5]
    assert loaded["ints"].dtype == gc.int64 and loaded["ints"].tolist() == [0, 1, 2, 3]
    fresh, _ = _models(seed=9)
    fresh.load_state_dict(loaded["model"])
    for a, b in zip(fresh.parameters(), g.parameters()):
        assert np.array_equal(a.numpy(), b.numpy())
    opt2 = gc.optim.Adam(fresh.parameters(), lr=0.01)
    opt2.load_state_dict(loaded["opt"])
    assert opt2.state_dict()["state"][0]["step"] == 2
    buffer = io.BytesIO()
    gc.save([gc.ones(2), {"k": 3}], buffer)
    buffer.seek(0)
    back = gc.load(buffer)
    assert back[0].tolist() == [1.0, 1.0] and back[1] == {"k": 3}


def test_load_refuses_garbage_with_one_line(tmp_path):
    (tmp_path / "bad.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(gc.UserError, match="not a file written by gradcraft.save"):
        gc.load(tmp_path / "bad.pt")
    with pytest.raises(gc.UserError, match="cannot store"):
        gc.save({"f": lambda: 0}, tmp_path / "x.pt")


def test_small_tensor_helpers_match_torch():
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    g, t = gc.tensor(data), torch.tensor(data)
    assert g.sum(axis=1).tolist() == t.sum(axis=1).tolist()
    assert g.mean(axis=0).tolist() == t.mean(axis=0).tolist()
    assert gc.max(g).item() == torch.max(t).item()
    assert gc.max(g, dim=1).indices.tolist() == torch.max(t, dim=1).indices.tolist()
    assert gc.max(g, gc.ones(3, 4) * 5).tolist() == torch.max(t, torch.ones(3, 4) * 5).tolist()
    assert g.is_contiguous() and not g.T.is_contiguous() and g.T.contiguous().is_contiguous()
    z = g.new_zeros(2, 3)
    assert z.shape == (2, 3) and z.dtype == gc.float32 and g.new_ones((2,)).tolist() == [1.0, 1.0]
    assert g.new_full((2,), 7).tolist() == [7.0, 7.0] and g.new_tensor([1, 2]).dtype == gc.float32
    np.testing.assert_allclose(gc.linspace(-1, 2, 7).numpy(), torch.linspace(-1, 2, 7).numpy())
    np.testing.assert_allclose(gc.linspace(0, 1, 1).numpy(), torch.linspace(0, 1, 1).numpy())
    a64 = np.linspace(0, 1, 5)
    assert gc.from_numpy(a64).dtype == gc.float64 and gc.from_numpy(np.arange(3)).dtype == gc.int64
    for eps in (1e-9, 1e-7, 1e-3):
        assert gc.allclose(g, g + eps) == torch.allclose(t, t + eps)
    assert gc.allclose(g, g + 1e-3, atol=1e-2) and gc.equal(g, g.clone()) and not gc.equal(g, g + 1)
    assert gc.tril(g).tolist() == torch.tril(t).tolist() and gc.triu(g, 1).tolist() == torch.triu(t, 1).tolist()
    assert (g // 5).tolist() == (t // 5).tolist() and (g % 5).tolist() == (t % 5).tolist()
    assert (7 // gc.tensor([2, -2])).tolist() == (7 // torch.tensor([2, -2])).tolist()
    assert gc.tensor([1.0, float("nan")]).isnan().tolist() == [False, True]
    assert [u.tolist() for u in g.unbind(1)] == [u.tolist() for u in t.unbind(1)]
    assert gc.is_tensor(g) and gc.numel(g) == 12 and gc.float == gc.float32 and gc.long == gc.int64


def test_functional_and_loss_modules_match_torch():
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal((4, 5)), rng.integers(0, 5, size=4)
    target = rng.random((4, 5))
    pairs = [
        (gnn.CrossEntropyLoss(label_smoothing=0.1), torch.nn.CrossEntropyLoss(label_smoothing=0.1), y),
        (gnn.MSELoss(reduction="sum"), torch.nn.MSELoss(reduction="sum"), target),
        (gnn.L1Loss(), torch.nn.L1Loss(), target),
        (gnn.SmoothL1Loss(beta=0.5), torch.nn.SmoothL1Loss(beta=0.5), target),
        (gnn.HuberLoss(delta=0.3), torch.nn.HuberLoss(delta=0.3), target),
        (gnn.BCEWithLogitsLoss(), torch.nn.BCEWithLogitsLoss(), target),
    ]
    for g_loss, t_loss, tgt in pairs:
        gx, tx = gc.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        a = g_loss(gx, gc.tensor(tgt))
        b = t_loss(tx, torch.tensor(tgt))
        a.backward()
        b.backward()
        np.testing.assert_allclose(a.item(), b.item(), rtol=1e-10)
        np.testing.assert_allclose(gx.grad.numpy(), tx.grad.numpy(), rtol=1e-9, atol=1e-12)
    logp = gF.log_softmax(gc.tensor(x), dim=1)
    np.testing.assert_allclose(
        gnn.NLLLoss()(logp, gc.tensor(y)).item(),
        torch.nn.NLLLoss()(torch.log_softmax(torch.tensor(x), 1), torch.tensor(y)).item(),
    )
    p = 1 / (1 + np.exp(-x))
    np.testing.assert_allclose(
        gnn.BCELoss()(gc.tensor(p), gc.tensor(target)).item(),
        torch.nn.BCELoss()(torch.tensor(p), torch.tensor(target)).item(),
        rtol=1e-10,
    )


def test_init_functions_have_torch_statistics():
    gc.manual_seed(0)
    w = gnn.Parameter(gc.zeros(200, 300))
    gnn.init.xavier_uniform_(w)
    bound = np.sqrt(6 / 500)
    assert np.abs(w.numpy()).max() <= bound and w.numpy().std() > bound / 2
    gnn.init.kaiming_normal_(w, nonlinearity="relu")
    assert abs(w.numpy().std() - np.sqrt(2 / 300)) < 0.005
    gnn.init.trunc_normal_(w, std=0.02)
    assert np.abs(w.numpy()).max() <= 2.0 and abs(w.numpy().std() - 0.02) < 0.002
    gnn.init.constant_(w, 0.5)
    assert (w.numpy() == 0.5).all()


def test_value_and_type_errors_are_python_s_and_one_line():
    with pytest.raises(ValueError, match="reduction"):
        gnn.MSELoss(reduction="avg")
    with pytest.raises(ValueError, match="reduction"):
        gF.l1_loss(gc.ones(2), gc.ones(2), reduction="avg")
    with pytest.raises(TypeError, match="numpy.ndarray"):
        gc.from_numpy([1, 2])
    for error in (ValueError, TypeError):
        with pytest.raises(gc.UserError):
            raise {ValueError: gc.errors.ValueError_, TypeError: gc.errors.TypeError_}[error]("x")
