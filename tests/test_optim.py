"""Optimizers, clipping and schedules against PyTorch."""

import math

import numpy as np
import pytest
import torch

import gradcraft as gc
from gradcraft.nn import Parameter
from gradcraft.optim import SGD, AdamW, CosineWithWarmup, clip_grad_norm_, grad_norm_and_scale


def _problem(seed=0):
    rng = np.random.default_rng(seed)
    return (
        [rng.standard_normal(s).astype(np.float32) for s in ((5, 3), (3,))],
        rng.standard_normal((8, 5)).astype(np.float32),
    )


def _loss_gc(params, x):
    w, b = params
    return ((gc.tensor(x) @ w + b).tanh() ** 2).sum()


def _loss_torch(params, x):
    w, b = params
    return ((torch.tensor(x) @ w + b).tanh() ** 2).sum()


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("clip", ["none", "functional", "fused"])
def test_adamw_matches_torch(fused, clip):
    (w0, b0), x = _problem()
    w, b = Parameter(gc.tensor(w0)), Parameter(gc.tensor(b0))
    tw, tb = torch.tensor(w0, requires_grad=True), torch.tensor(b0, requires_grad=True)
    opt = AdamW(
        [{"params": [w], "weight_decay": 0.1}, {"params": [b], "weight_decay": 0.0}],
        lr=0.01,
        betas=(0.9, 0.95),
        fused=fused,
    )
    topt = torch.optim.AdamW(
        [{"params": [tw], "weight_decay": 0.1}, {"params": [tb], "weight_decay": 0.0}], lr=0.01, betas=(0.9, 0.95)
    )
    for step in range(6):
        for g in opt.param_groups:
            g["lr"] = 0.01 * (step + 1) / 6  # a changing lr must reach the device scalars
        for g in topt.param_groups:
            g["lr"] = 0.01 * (step + 1) / 6
        _loss_gc([w, b], x).backward()
        _loss_torch([tw, tb], x).backward()
        tnorm = torch.nn.utils.clip_grad_norm_([tw, tb], 0.5) if clip != "none" else None
        scale = None
        if clip == "functional":
            norm = clip_grad_norm_([w, b], 0.5)
            np.testing.assert_allclose(norm.item(), tnorm.item(), rtol=1e-6)
        elif clip == "fused":
            scale = grad_norm_and_scale([w, b], 0.5)
            np.testing.assert_allclose(scale.numpy()[0], tnorm.item(), rtol=1e-6)
        opt.step(grad_scale=scale)
        topt.step()
        opt.zero_grad()
        topt.zero_grad()
        np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(b.numpy(), tb.detach().numpy(), rtol=1e-5, atol=1e-7)


def test_sgd_with_momentum_matches_torch():
    (w0, b0), x = _problem(1)
    w, b = Parameter(gc.tensor(w0)), Parameter(gc.tensor(b0))
    tw, tb = torch.tensor(w0, requires_grad=True), torch.tensor(b0, requires_grad=True)
    opt = SGD([w, b], lr=0.05, momentum=0.9, weight_decay=0.01)
    topt = torch.optim.SGD([tw, tb], lr=0.05, momentum=0.9, weight_decay=0.01)
    for _ in range(5):
        _loss_gc([w, b], x).backward()
        _loss_torch([tw, tb], x).backward()
        opt.step()
        topt.step()
        opt.zero_grad()
        topt.zero_grad()
    np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-5, atol=1e-7)


def test_optimizer_state_dict_round_trip_continues_identically():
    (w0, b0), x = _problem(2)
    a = [Parameter(gc.tensor(w0)), Parameter(gc.tensor(b0))]
    opt_a = AdamW(a, lr=0.01)
    for _ in range(3):
        _loss_gc(a, x).backward()
        opt_a.step()
        opt_a.zero_grad()
    b = [Parameter(gc.tensor(p.numpy())) for p in a]
    opt_b = AdamW(b, lr=0.01)
    opt_b.load_state_dict(opt_a.state_dict())
    for params, opt in ((a, opt_a), (b, opt_b)):
        _loss_gc(params, x).backward()
        opt.step()
    assert np.array_equal(a[0].numpy(), b[0].numpy())


def test_cosine_schedule_with_warmup():
    s = CosineWithWarmup(max_lr=1.0, min_lr=0.1, warmup_steps=10, total_steps=110)
    assert s(0) == pytest.approx(0.1) and s(9) == pytest.approx(1.0)
    assert s(60) == pytest.approx(0.1 + 0.5 * 0.9 * (1 + math.cos(math.pi * 0.5)))
    assert s(110) == pytest.approx(0.1) and s(500) == pytest.approx(0.1)
