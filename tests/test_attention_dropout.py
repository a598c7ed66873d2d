"""Attention-weight dropout (F.scaled_dot_product_attention(dropout_p=...)): the Philox4x32 reference
against the published known-answer vectors, the keep rate and scaling, the flash path and the explicit
path drawing the same mask, and outputs and gradients against PyTorch given that mask. The CUDA
kernels are checked against these references in tests/test_cuda_attention.py."""

import numpy as np
import pytest
import torch
from test_flash_attention import allowed_mask

import gradcraft as gc
import gradcraft.nn.functional as F
from gradcraft.backend import philox
from gradcraft.errors import UserError
from gradcraft.ops.attention import sdpa_kernel
from gradcraft.ops.creation import advance_dropout


def test_philox4x32_known_answers():
    """Random123's known-answer vectors for Philox4x32-10 (zeros, all ones, digits of pi)."""
    cases = [
        ((0, 0, 0, 0, 0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
        ((0xFFFFFFFF,) * 6, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
        (
            (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344, 0xA4093822, 0x299F31D0),
            (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
        ),
    ]
    for args, expected in cases:
        assert tuple(int(w) for w in philox.philox4x32(*args)) == expected


def test_mask_of_a_block_is_the_block_of_the_whole_mask():
    """The mask is numbered by global (head row, query, key): any block of it (the windowed path's, or a
    kernel tile's) equals the same block of the whole, for key offsets not a multiple of 8 too."""
    state = (123456789123, 7)
    whole = philox.attention_keep(6, 13, 21, 0, 13, 0, 21, state, 3, 0.3)
    for i0, t, j0, s in ((0, 13, 0, 21), (4, 5, 3, 11), (12, 1, 17, 4), (2, 7, 8, 8)):
        block = philox.attention_keep(6, 13, 21, i0, t, j0, s, state, 3, 0.3)
        np.testing.assert_array_equal(block, whole[:, i0 : i0 + t, j0 : j0 + s])
    assert not np.array_equal(whole, philox.attention_keep(6, 13, 21, 0, 13, 0, 21, state, 4, 0.3))
    assert not np.array_equal(whole, philox.attention_keep(6, 13, 21, 0, 13, 0, 21, (123456789123, 8), 3, 0.3))


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
@pytest.mark.parametrize("choice", ["flash", "math"])
def test_keep_rate_and_scale(p, choice):
    """Equal scores make every visible weight of query i 1 / (i + 1): output i is then the number of
    kept weights times scale / (i + 1), so the outputs count the kept weights exactly."""
    gc.manual_seed(0)
    B, H, T, D = 2, 4, 64, 8
    q = gc.zeros(B, H, T, D)
    v = gc.ones(B, H, T, D)
    with sdpa_kernel(choice):
        out = F.scaled_dot_product_attention(q, q, v, dropout_p=p, is_causal=True).numpy()[..., 0]
    kept = out * np.arange(1, T + 1) / philox.keep_scale(p)
    np.testing.assert_allclose(kept, np.round(kept), atol=1e-4)  # whole counts (float32 sums)
    n = B * H * T * (T + 1) // 2
    rate = kept.sum() / n
    assert abs(rate - (1 - p)) < 4 * np.sqrt(p * (1 - p) / n)
    assert philox.keep_scale(p) * (1 - philox.threshold(p) / 65536) == pytest.approx(1.0, abs=1e-12)


def _inputs(B, H, Hkv, T, S, D):
    r = np.random.default_rng(5)
    arrays = [r.standard_normal(s) for s in ((B, H, T, D), (B, Hkv, S, D), (B, Hkv, S, D), (B, H, T, D))]
    return arrays


CASES = [  # (B, H, Hkv, T, S, D, causal, window)
    (2, 4, 2, 9, 9, 8, True, None),
    (1, 2, 1, 5, 11, 16, True, None),
    (2, 2, 2, 13, 13, 8, True, 3),
    (1, 3, 3, 6, 10, 8, False, None),
]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("choice", ["flash", "math"])
def test_dropout_matches_torch_with_the_same_mask(case, choice):
    """Output and gradients equal PyTorch's explicit attention given our mask, on the flash path and
    on the explicit path (windowed blocks included: 13 > 2 * 3)."""
    B, H, Hkv, T, S, D, causal, window = case
    p = 0.25
    arrays = _inputs(B, H, Hkv, T, S, D)
    gc.manual_seed(11)
    advance_dropout("cpu")
    rng = gc.get_rng_state()
    state = (rng["dropout_seed"], rng["dropout"]["cpu"][0])  # [seed, counter]; this call is stream 0
    q, k, v = (gc.tensor(a, requires_grad=True) for a in arrays[:3])
    with sdpa_kernel(choice):
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=causal, window=window)
    out.backward(gc.tensor(arrays[3]))

    keep = philox.attention_keep(B * H, T, S, 0, T, 0, S, state, 0, p).reshape(B, H, T, S)
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in arrays[:3])
    G = H // Hkv
    kk, vv = tk.repeat_interleave(G, dim=1), tv.repeat_interleave(G, dim=1)
    scores = tq @ kk.transpose(-1, -2) / np.sqrt(D)
    allowed = allowed_mask(T, S, causal, window)
    w = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    w = w * torch.tensor(keep) * philox.keep_scale(p)
    expected = w @ vv
    expected.backward(torch.tensor(arrays[3]))
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), atol=1e-10)
    for ours, theirs in ((q, tq), (k, tk), (v, tv)):
        np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), atol=1e-9)


def test_two_calls_in_one_step_draw_different_masks_and_a_new_step_new_ones():
    gc.manual_seed(3)
    q = gc.tensor(np.random.default_rng(0).standard_normal((1, 2, 8, 8)))
    advance_dropout("cpu")
    a = F.scaled_dot_product_attention(q, q, q, dropout_p=0.5, is_causal=True).numpy()
    b = F.scaled_dot_product_attention(q, q, q, dropout_p=0.5, is_causal=True).numpy()
    advance_dropout("cpu")
    c = F.scaled_dot_product_attention(q, q, q, dropout_p=0.5, is_causal=True).numpy()
    gc.manual_seed(3)
    advance_dropout("cpu")
    again = F.scaled_dot_product_attention(q, q, q, dropout_p=0.5, is_causal=True).numpy()
    assert not np.allclose(a, b) and not np.allclose(a, c)
    np.testing.assert_array_equal(a, again)


def test_dropout_p_out_of_range_is_one_clear_error():
    q = gc.zeros(1, 1, 2, 4)
    for p in (-0.1, 1.0, 2.0):
        with pytest.raises(UserError, match="dropout_p"):
            F.scaled_dot_product_attention(q, q, q, dropout_p=p)
