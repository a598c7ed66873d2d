"""Flash attention's op (output + saved log-sum-exp, a gradient that reads them) and its NumPy
reference kernels against PyTorch, on the CPU. tests/test_cuda_attention.py checks the CUDA kernels against
these references."""

import numpy as np
import pytest
import torch

import gradcraft as gc
import gradcraft.nn.functional as F
from gradcraft.errors import UserError
from gradcraft.models import Transformer, preset
from gradcraft.ops.attention import sdpa_kernel


def allowed_mask(T, S, causal, window):
    """(T, S) bool, True where query i may see key j, with our alignment: query i is position
    i + S - T of the keys."""
    i = torch.arange(T)[:, None] + (S - T)
    j = torch.arange(S)[None, :]
    allowed = torch.ones(T, S, dtype=torch.bool)
    if causal:
        allowed &= j <= i
    if window:
        allowed &= j > i - window
    return allowed


def torch_attention(q, k, v, causal, window):
    """PyTorch SDPA with our alignment (allowed_mask)."""
    allowed = allowed_mask(q.shape[2], k.shape[2], causal, window)
    G = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(G, dim=1), v.repeat_interleave(G, dim=1)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed)


CASES = [  # (B, H, Hkv, T, S, D, causal, window)
    (2, 4, 4, 7, 7, 8, True, None),
    (1, 4, 2, 5, 9, 16, True, None),
    (2, 6, 2, 11, 11, 8, True, 3),
    (1, 2, 1, 6, 4, 8, False, None),
    (1, 2, 2, 1, 10, 8, True, None),
    (1, 3, 3, 9, 9, 12, False, 2),
]


@pytest.mark.parametrize("case", CASES)
def test_flash_matches_torch(case):
    B, H, Hkv, T, S, D, causal, window = case
    r = np.random.default_rng()
    arrays = [r.standard_normal(s) for s in ((B, H, T, D), (B, Hkv, S, D), (B, Hkv, S, D), (B, H, T, D))]
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in arrays[:3])
    expected = torch_attention(tq, tk, tv, causal, window)
    expected.backward(torch.tensor(arrays[3]))
    q, k, v = (gc.tensor(a, requires_grad=True) for a in arrays[:3])
    with sdpa_kernel("flash"):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, window=window)
    assert out._node.op == "flash_attention"
    out.backward(gc.tensor(arrays[3]))
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), atol=1e-10)
    for ours, theirs in ((q, tq), (k, tk), (v, tv)):
        np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), atol=1e-9)


def test_log_sum_exp_and_empty_rows():
    """The saved statistic is log sum exp(scale q.k) over visible keys; a query that sees no key (T > S,
    causal) gets zeros and -inf, and no NaN reaches any gradient."""
    from gradcraft.device import get_backend

    kernels = get_backend("cpu").reference_kernels
    r = np.random.default_rng(1)
    q, k, v = r.standard_normal((1, 1, 5, 4)), r.standard_normal((1, 1, 3, 4)), r.standard_normal((1, 1, 3, 4))
    out, lse = kernels["flash_attention"](q, k, v, scale=0.5, causal=True, window=None)
    scores = 0.5 * q[0, 0] @ k[0, 0].T
    for i in range(5):
        visible = scores[i, : i - 1] if i >= 2 else scores[i, :0]
        if visible.size:
            assert np.isclose(lse[0, 0, i], np.log(np.exp(visible).sum()))
        else:
            assert lse[0, 0, i] == -np.inf and not out[0, 0, i].any()
    grads = kernels["flash_attention_backward"](
        q, k, v, out, lse, np.ones_like(out), scale=0.5, causal=True, window=None
    )
    assert all(np.isfinite(g).all() for g in grads)


def test_forward_realized_before_backward_keeps_the_statistics():
    """Realizing the output first (printing a loss, say) must keep the log-sum-exp for backward."""
    r = np.random.default_rng(2)
    arrays = [r.standard_normal((1, 2, 6, 8)) for _ in range(3)]
    grads = []
    for realize_first in (False, True):
        leaves = [gc.tensor(a, requires_grad=True) for a in arrays]
        with sdpa_kernel("flash"):
            loss = F.scaled_dot_product_attention(*leaves, is_causal=True).sum()
        if realize_first:
            loss.realize()
            out_node = loss._node.inputs[0]._node
            assert out_node.saved[0]._buf is not None  # kept, not recomputed
        loss.backward()
        grads.append([t.grad.numpy() for t in leaves])
    for a, b in zip(*grads):
        np.testing.assert_array_equal(a, b)


def test_model_with_flash_equals_explicit():
    """A whole training step of a GQA model: flash attention against explicit attention (weights kept)."""
    cfg = preset("toy-v0", n_kv_heads=2, seq_len=16)
    gc.manual_seed(0)
    model = Transformer(cfg)
    idx = gc.tensor(np.random.default_rng(3).integers(0, cfg.vocab_size, (2, 16)))
    results = []
    for choice in ("flash", "math"):
        model.zero_grad()
        with sdpa_kernel(choice):
            loss = model(idx[:, :-1], targets=idx[:, 1:])[1]
        loss.backward()
        results.append([loss.item()] + [p.grad.numpy() for p in model.parameters()])
    np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-6)
    for a, b in zip(results[0][1:], results[1][1:]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_sdpa_kernel_choice_errors():
    q = gc.randn(1, 1, 4, 8)
    with pytest.raises(UserError, match="choice"):
        with sdpa_kernel("fast"):
            pass
    with sdpa_kernel("flash"), pytest.raises(UserError, match="attn_mask"):
        F.scaled_dot_product_attention(q, q, q, attn_mask=gc.ones(4, 4, dtype=gc.bool))
    with pytest.raises(UserError, match="share a dtype"):
        F.scaled_dot_product_attention(q, q.to(gc.float64), q)
