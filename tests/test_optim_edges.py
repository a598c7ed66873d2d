"""Optimizers at the edges of their arithmetic, against torch.optim.

tests/test_optim.py draws gradients of order 0.1 to 1, where Adam's eps (1e-8) is invisible. Here the
gradients are chosen where each term of an update formula shows: gradients near eps (1e-9 to 1e-7,
where eps halves the update, and where eps inside the square root would change it a thousandfold),
exactly zero gradients (a parameter that stops learning keeps moving by its momentum and decay,
never by a NaN of 0/0), mixed scales within one tensor (1e-8 beside 1e2), sparse gradients, and a
parameter with no gradient on some steps (skipped: its state and step count stand still). Weight decay
is on and off. After every step every parameter equals PyTorch's, and at the end every parameter's
state (each buffer, and the step count) equals PyTorch's state for it.
"""

import numpy as np
import pytest
import torch

import gradcraft as gc
from gradcraft.nn import Parameter
from gradcraft.optim import SGD, Adagrad, Adam, AdamW, RMSprop

SHAPES = ((4, 6), (6,), (3,))
STEPS = 5


def _gradients(kind, step, rng):
    """The gradients of step `step` for the parameters of SHAPES (None: no gradient this step)."""
    if kind == "near_eps":
        return [rng.choice([-1, 1], size=s) * 10.0 ** rng.uniform(-9, -7, size=s) for s in SHAPES]
    if kind == "zero":  # learns for two steps, then every gradient is exactly zero
        scale = 1.0 if step < 2 else 0.0
        return [rng.standard_normal(s) * scale for s in SHAPES]
    if kind == "mixed_scales":
        return [rng.standard_normal(s) * 10.0 ** rng.integers(-8, 3, size=s) for s in SHAPES]
    if kind == "sparse":  # most entries zero, a few large
        return [rng.standard_normal(s) * (rng.random(s) < 0.2) * 10.0 for s in SHAPES]
    if kind == "some_missing":  # the last parameter has no gradient on odd steps; the second is zero on step 3
        grads = [rng.standard_normal(s) * 0.1 for s in SHAPES]
        if step % 2:
            grads[2] = None
        if step == 3:
            grads[1] = np.zeros(SHAPES[1])
        return grads
    raise ValueError(kind)


OPTIMIZERS = {
    "sgd": (SGD, torch.optim.SGD, dict(lr=0.1)),
    "sgd_momentum_decay": (SGD, torch.optim.SGD, dict(lr=0.1, momentum=0.9, weight_decay=0.1)),
    "sgd_nesterov": (SGD, torch.optim.SGD, dict(lr=0.1, momentum=0.8, nesterov=True)),
    "sgd_dampening": (SGD, torch.optim.SGD, dict(lr=0.1, momentum=0.9, dampening=0.3, weight_decay=0.01)),
    "adam": (Adam, torch.optim.Adam, dict(lr=0.01)),
    "adam_decay_amsgrad": (Adam, torch.optim.Adam, dict(lr=0.01, weight_decay=0.1, amsgrad=True)),
    "adamw": (AdamW, torch.optim.AdamW, dict(lr=0.01, weight_decay=0.0, fused=False)),
    "adamw_decay": (AdamW, torch.optim.AdamW, dict(lr=0.01, weight_decay=0.1, fused=False)),
    "adamw_fused_decay": (AdamW, torch.optim.AdamW, dict(lr=0.01, weight_decay=0.1, fused=True)),
    "adamw_eps_large": (AdamW, torch.optim.AdamW, dict(lr=0.01, eps=1e-6, betas=(0.8, 0.9), fused=False)),
    "rmsprop": (RMSprop, torch.optim.RMSprop, dict(lr=0.01)),
    "rmsprop_centered_momentum_decay": (
        RMSprop,
        torch.optim.RMSprop,
        dict(lr=0.01, centered=True, momentum=0.9, weight_decay=0.1),
    ),
    "adagrad": (Adagrad, torch.optim.Adagrad, dict(lr=0.1)),
    "adagrad_decay": (Adagrad, torch.optim.Adagrad, dict(lr=0.1, lr_decay=0.1, weight_decay=0.1, eps=1e-9)),
}
GRADIENTS = ["near_eps", "zero", "mixed_scales", "sparse", "some_missing"]


def _torch_kwargs(kw):
    return {k: v for k, v in kw.items() if k != "fused"}


def _pair(name, seed=0):
    ours, theirs, kw = OPTIMIZERS[name]
    rng = np.random.default_rng(seed)
    init = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    g_params = [Parameter(gc.tensor(a)) for a in init]
    t_params = [torch.tensor(a, requires_grad=True) for a in init]
    if name.startswith("adamw") and "fused" not in kw:
        kw = dict(kw, fused=False)
    return g_params, ours(g_params, **kw), t_params, theirs(t_params, **_torch_kwargs(kw))


def _step(g_params, g_opt, t_params, t_opt, grads):
    for gp, tp, g in zip(g_params, t_params, grads):
        gp.grad = None if g is None else gc.tensor(g.astype(np.float32))
        tp.grad = None if g is None else torch.tensor(g.astype(np.float32))
    g_opt.step()
    t_opt.step()


def _torch_state(t_opt, t_params):
    """PyTorch's state of each parameter, by position, as NumPy (step as an int)."""
    out = {}
    for i, p in enumerate(t_params):
        if p in t_opt.state:
            out[i] = {k: (int(v.item()) if k == "step" else v.detach().numpy()) for k, v in t_opt.state[p].items()}
    return out


def _assert_state_equal(ours, theirs, rtol, atol):
    assert sorted(ours) == sorted(theirs), "the parameters with state differ"
    for i in theirs:
        for key, value in theirs[i].items():
            if key == "momentum_buffer" and value is None:
                continue
            assert key in ours[i], f"parameter {i}: no {key!r} in gradcraft's state {sorted(ours[i])}"
            if key == "step":
                assert int(ours[i][key]) == value, f"parameter {i}: step {ours[i][key]} != {value}"
            else:
                np.testing.assert_allclose(ours[i][key], value, rtol=rtol, atol=atol, err_msg=f"param {i} {key}")


@pytest.mark.parametrize("kind", GRADIENTS)
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_optimizer_at_the_edges_matches_torch(name, kind):
    g_params, g_opt, t_params, t_opt = _pair(name)
    rng = np.random.default_rng(1)
    for step in range(STEPS):
        _step(g_params, g_opt, t_params, t_opt, _gradients(kind, step, rng))
        for i, (gp, tp) in enumerate(zip(g_params, t_params)):
            # atol far below the smallest update (lr * 1e-3): eps in the wrong place shows
            np.testing.assert_allclose(
                gp.numpy(), tp.detach().numpy(), rtol=2e-6, atol=1e-7, err_msg=f"{name} {kind} step {step} param {i}"
            )
            assert np.isfinite(gp.numpy()).all()
    ours = g_opt.state_dict()["state"]
    _assert_state_equal(ours, _torch_state(t_opt, t_params), rtol=1e-5, atol=1e-12)


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_state_dict_round_trip_restores_every_parameters_state(name):
    """Three steps, then the state into a fresh optimizer over copies of the parameters: every
    parameter's state is equal, and both continue identically (bitwise) for three more steps; the
    saved state is also PyTorch's (same names, same values) after the same steps."""
    g_params, g_opt, t_params, t_opt = _pair(name, seed=3)
    rng = np.random.default_rng(4)
    for step in range(3):
        _step(g_params, g_opt, t_params, t_opt, _gradients("some_missing", step, rng))
    saved = g_opt.state_dict()
    _assert_state_equal(saved["state"], _torch_state(t_opt, t_params), rtol=1e-5, atol=1e-12)
    assert len(saved["state"]) == (0 if name == "sgd" else len(SHAPES))  # every parameter's, not the first's

    ours, _, kw = OPTIMIZERS[name]
    copies = [Parameter(gc.tensor(p.numpy())) for p in g_params]
    restored = ours(copies, **{k: v for k, v in kw.items()})
    restored.load_state_dict(saved)
    again = restored.state_dict()
    assert sorted(again["state"]) == sorted(saved["state"])
    for i, state in saved["state"].items():
        assert sorted(again["state"][i]) == sorted(state), f"parameter {i}: keys differ"
        for key, value in state.items():
            np.testing.assert_array_equal(np.asarray(again["state"][i][key]), np.asarray(value), err_msg=f"{i} {key}")
    assert again["param_groups"] == saved["param_groups"]
    for step in range(3, 6):
        grads = _gradients("some_missing", step, rng)
        for opt, params in ((g_opt, g_params), (restored, copies)):
            for p, g in zip(params, grads):
                p.grad = None if g is None else gc.tensor(g.astype(np.float32))
            opt.step()
    for i, (a, b) in enumerate(zip(g_params, copies)):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=f"parameter {i} after resuming")
