"""Finite-difference gradient checks (float64) of the fused ops, independent of any other library."""

import numpy as np
import pytest

import gradcraft as gc
import gradcraft.nn.functional as F


def numeric_grad(f, arrays, index, eps=1e-6):
    """d sum(f(...) * upstream) / d arrays[index] by central differences."""
    base = arrays[index]
    grad = np.zeros_like(base)
    for pos in np.ndindex(base.shape):
        old = base[pos]
        base[pos] = old + eps
        plus = f(*arrays)
        base[pos] = old - eps
        minus = f(*arrays)
        base[pos] = old
        grad[pos] = (plus - minus) / (2 * eps)
    return grad


def check(fn, shapes, consts=(), seed=0):
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(s) for s in shapes]
    out_shape = fn(*[gc.tensor(a) for a in arrays], *consts).shape
    upstream = rng.standard_normal(out_shape)

    def scalar(*arrs):
        return float((fn(*[gc.tensor(a) for a in arrs], *consts).numpy() * upstream).sum())

    leaves = [gc.tensor(a, requires_grad=True) for a in arrays]
    (fn(*leaves, *consts) * gc.tensor(upstream)).sum().backward()
    for i, leaf in enumerate(leaves):
        np.testing.assert_allclose(
            leaf.grad.numpy(), numeric_grad(scalar, arrays, i), rtol=1e-5, atol=1e-7, err_msg=f"input {i}"
        )


TARGETS = gc.tensor(np.array([1, 0, 3, 2, 3]))
COS, SIN = F.rope_frequencies(4, 6)
FUSED = {
    "softmax": (lambda x: F.softmax(x, dim=-1), [(3, 5)]),
    "log_softmax": (lambda x: F.log_softmax(x, dim=0), [(3, 5)]),
    "cross_entropy": (lambda x: F.cross_entropy(x, TARGETS, label_smoothing=0.1), [(5, 4)]),
    "cross_entropy_ignore": (lambda x: F.cross_entropy(x, TARGETS, ignore_index=3, reduction="sum"), [(5, 4)]),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (4,), w, b), [(3, 4), (4,), (4,)]),
    "rms_norm": (lambda x, w: F.rms_norm(x, (4,), w, eps=1e-5), [(2, 3, 4), (4,)]),
    "embedding": (lambda w: F.embedding(TARGETS.reshape(1, 5), w), [(4, 3)]),
    "gelu": (lambda x: F.gelu(x), [(3, 4)]),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), [(3, 4)]),
    "silu": (lambda x: F.silu(x), [(3, 4)]),
    "rope": (lambda x: F.rotary_embedding(x, COS.double(), SIN.double()), [(1, 2, 4, 6)]),
    "sdpa_causal_gqa": (
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        [(1, 4, 3, 2), (1, 2, 3, 2), (1, 2, 3, 2)],
    ),
    "sdpa_window": (
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, window=2),
        [(1, 1, 5, 3), (1, 1, 5, 3), (1, 1, 5, 3)],
    ),
}


@pytest.mark.parametrize("name", sorted(FUSED))
def test_fused_op_gradient_matches_finite_differences(name):
    fn, shapes = FUSED[name]
    check(fn, shapes)


def test_dropout_backward_uses_the_forward_mask():
    gc.manual_seed(3)
    x = gc.ones(200, 50, dtype=gc.float64, requires_grad=True)
    y = F.dropout(x, p=0.3)
    y.sum().backward()
    out = y.numpy()
    kept = out != 0
    assert 0.6 < kept.mean() < 0.8
    np.testing.assert_allclose(out[kept], 1 / 0.7)
    np.testing.assert_allclose(x.grad.numpy(), out)  # d(sum y)/dx is the same mask, same scale
