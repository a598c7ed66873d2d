"""F.linear with a bias as one linear_bias op (the bias in the product's epilogue, its gradient summed
by the weight gradient's product, backend/cuda/linear.py), where the device says so: the same values
and gradients as PyTorch's linear. On the CPU the op is switched on for the test (its kernels are the
reference the CUDA kernels are tested against in tests/test_cuda_linear.py)."""

import numpy as np
import pytest
import torch

import gradcraft as gc
import gradcraft.nn.functional as F
from gradcraft.device import get_backend


@pytest.fixture
def fused(monkeypatch, cpu_kernels_run):
    """linear_bias switched on for the CPU; the kernels run from then on."""
    monkeypatch.setattr(type(get_backend("cpu")), "fused_linear_bias", lambda self, dtype: True)
    return cpu_kernels_run


@pytest.mark.parametrize("shape", [(5, 7), (2, 3, 7), (4, 1, 2, 7)])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_linear_with_bias_matches_torch(fused, shape, dtype):
    rng = np.random.default_rng(0)
    x0, w0, b0, g0 = (rng.standard_normal(s).astype(np.float32) for s in (shape, (6, 7), (6,), shape[:-1] + (6,)))
    ours = [gc.tensor(a, requires_grad=True) for a in (x0, w0, b0)]
    ref = [torch.tensor(a, requires_grad=True) for a in (x0, w0, b0)]
    dt, tdt = getattr(gc, dtype), getattr(torch, dtype)
    y = F.linear(*(t.to(dt) for t in ours))
    ty = torch.nn.functional.linear(*(t.to(tdt) for t in ref))
    y.backward(gc.tensor(g0).to(dt))
    ty.backward(torch.tensor(g0).to(tdt))
    assert "linear_bias" in fused and "linear_bias_backward" in fused and "add" not in fused
    tol = 1e-5 if dtype == "float32" else 2e-2
    np.testing.assert_allclose(y.float().numpy(), ty.float().detach().numpy(), rtol=tol, atol=tol)
    for t, r in zip(ours, ref):
        np.testing.assert_allclose(t.grad.numpy(), r.grad.numpy(), rtol=tol, atol=tol * 4)


def test_only_the_gradients_asked_for(fused):
    x = gc.randn(4, 3, requires_grad=True)
    w, b = gc.randn(2, 3), gc.randn(2)
    F.linear(x, w, b).sum().backward()
    assert "linear_bias_backward" not in fused  # neither weight nor bias wants a gradient
    np.testing.assert_allclose(x.grad.numpy(), np.ones((4, 2), np.float32) @ w.numpy(), rtol=1e-6)


def _train(steps=3):
    from gradcraft.models import ModelConfig, Transformer

    gc.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=40, seq_len=8, dim=16, n_layers=2, n_heads=2))
    opt = gc.optim.AdamW(model.parameters(), lr=1e-2)
    idx = gc.tensor(np.random.default_rng(0).integers(0, 40, size=(2, 8)))
    losses = []
    for _ in range(steps):
        _, loss = model(idx, idx)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


def test_a_model_trains_to_the_same_losses(monkeypatch):
    plain = _train()
    monkeypatch.setattr(type(get_backend("cpu")), "fused_linear_bias", lambda self, dtype: True)
    np.testing.assert_allclose(_train(), plain, rtol=1e-5)


@pytest.mark.parametrize("wants", [(True, True, True), (False, True, True), (True, True, False), (False, False, True)])
def test_strided_operands_and_partial_gradients_match_torch(fused, wants):
    # a permuted 3-D input and a transposed weight (both strided), each of x, w, b with or without grad
    rng = np.random.default_rng(1)
    x0, w0, b0, g0 = (rng.standard_normal(s).astype(np.float32) for s in ((3, 7, 2), (7, 6), (6,), (3, 2, 6)))
    ours = [gc.tensor(a, requires_grad=r) for a, r in zip((x0, w0, b0), wants)]
    ref = [torch.tensor(a, requires_grad=r) for a, r in zip((x0, w0, b0), wants)]
    y = F.linear(ours[0].permute(0, 2, 1), ours[1].mT, ours[2])
    ty = torch.nn.functional.linear(ref[0].permute(0, 2, 1), ref[1].mT, ref[2])
    y.backward(gc.tensor(g0))
    ty.backward(torch.tensor(g0))
    assert "linear_bias" in fused
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-5, atol=1e-5)
    for t, r in zip(ours, ref):
        if r.requires_grad:
            np.testing.assert_allclose(t.grad.numpy(), r.grad.numpy(), rtol=1e-5, atol=1e-5)
        else:
            assert t.grad is None
