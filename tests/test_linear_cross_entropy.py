"""F.linear_cross_entropy: an output layer and its loss in one op. The fused kernel (the logits never
held whole; their gradient and the inputs' computed chunk by chunk in the forward pass) is checked on
the CPU through its NumPy reference against PyTorch; tests/test_cuda_linear.py checks the CUDA kernel against
that reference."""

import numpy as np
import pytest
import torch

import gradcraft as gc
import gradcraft.nn.functional as F
from gradcraft.device import get_backend
from gradcraft.errors import UserError
from gradcraft.models import Transformer, preset


def ops_of(tensor) -> set:
    """The ops of the lazy graph behind a tensor."""
    seen, stack, ops = set(), [tensor._node], set()
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        ops.add(node.op)
        stack.extend(t._node for t in node.inputs)
    return ops


@pytest.fixture(params=[False, True], ids=["matmul+cross_entropy", "fused"])
def fused(request, monkeypatch):
    """Run the test with and without the fused kernel (the CPU takes the matmul path by default)."""
    monkeypatch.setattr(type(get_backend("cpu")), "fused_linear_cross_entropy", lambda self, dtype: request.param)
    return request.param


@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_loss_and_gradients_match_torch(fused, reduction, smoothing):
    r = np.random.default_rng(3)
    N, C, V, valid = 37, 12, 29, 25  # the last 4 rows of the weight: padding, left out of the classes
    x, w = r.standard_normal((N, C)), r.standard_normal((V, C)) * 0.5
    target = r.integers(0, valid, N)
    target[[3, 10]] = -100  # ignored rows
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    logits = (tx @ tw.T)[:, :valid]
    expected = torch.nn.functional.cross_entropy(
        logits, torch.tensor(target), reduction=reduction, label_smoothing=smoothing
    )
    (expected * 3.0).backward()
    gx, gw = (gc.tensor(a, dtype=gc.float32, requires_grad=True) for a in (x, w))
    loss = F.linear_cross_entropy(
        gx, gw, gc.tensor(target), reduction=reduction, label_smoothing=smoothing, valid_classes=valid
    )
    assert ("linear_cross_entropy" in ops_of(loss)) == fused
    (loss * 3.0).backward()
    np.testing.assert_allclose(loss.item(), expected.item(), rtol=1e-5)
    np.testing.assert_allclose(gx.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(gw.grad.numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-6)


def test_chunks_give_the_same_numbers():
    """The kernel's row chunks (forced small here) change nothing: the same losses and gradients."""
    kernel = get_backend("cpu").reference_kernels["linear_cross_entropy"]
    r = np.random.default_rng(0)
    x, w = r.standard_normal((50, 8)).astype(np.float32), r.standard_normal((20, 8)).astype(np.float32)
    t = r.integers(0, 20, 50)
    attrs = {"ignore_index": -100, "label_smoothing": 0.05, "valid_classes": 20}
    whole = kernel(x, w, t, **attrs)
    chunked = kernel(x, w, t, chunk_bytes=7 * 20 * 4, **attrs)  # 7 rows a chunk
    for a, b in zip(whole, chunked):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_no_gradient_takes_the_plain_path(monkeypatch):
    monkeypatch.setattr(type(get_backend("cpu")), "fused_linear_cross_entropy", lambda self, dtype: True)
    x, w = gc.randn(4, 3), gc.randn(5, 3)
    with gc.no_grad():
        loss = F.linear_cross_entropy(x.requires_grad_(), w, gc.tensor([0, 1, 2, 3]))
    assert "linear_cross_entropy" not in ops_of(loss)


def test_bad_arguments_are_one_line_errors():
    x, w = gc.zeros(4, 3), gc.zeros(5, 3)
    with pytest.raises(UserError, match="reduction"):
        F.linear_cross_entropy(x, w, gc.tensor([0, 1, 2, 3]), reduction="none")
    with pytest.raises(UserError, match="do not fit"):
        F.linear_cross_entropy(x, gc.zeros(5, 4), gc.tensor([0, 1, 2, 3]))
    with pytest.raises(UserError, match="target shape"):
        F.linear_cross_entropy(x, w, gc.tensor([0, 1]))


def test_a_model_step_is_the_same_with_the_fused_loss(fused):
    """gpt2-style model with a padded vocabulary and tied embeddings: loss and every gradient equal
    the matmul + cross_entropy path's (run with the other setting of the fixture)."""
    cfg = preset("gpt2-124m", vocab_size=61, vocab_pad_multiple=16, seq_len=16, n_layers=1, dim=32, n_heads=2)
    gc.manual_seed(0)
    model = Transformer(cfg)
    r = np.random.default_rng(1)
    x, y = gc.tensor(r.integers(0, 61, (2, 16))), gc.tensor(r.integers(0, 61, (2, 16)))
    logits, loss = model(x, y, label_smoothing=0.1)
    loss.backward()
    grads = {name: p.grad.numpy().copy() for name, p in model.named_parameters()}
    # the reference: the logits the model returns, through cross_entropy
    model.zero_grad()
    logits, _ = model(x, y)
    ref = F.cross_entropy(logits.reshape(32, 61), y.reshape(32), label_smoothing=0.1)
    ref.backward()
    np.testing.assert_allclose(loss.item(), ref.item(), rtol=1e-5)
    for name, p in model.named_parameters():
        np.testing.assert_allclose(grads[name], p.grad.numpy(), rtol=2e-4, atol=1e-6, err_msg=name)
