"""Launchers for kernels/softmax.cu: softmax and log-softmax over rows, forward and backward, with the
attention masks fused (masked_softmax; sdpa.py launches them too). backend/cpu/softmax.py is their reference."""

import cupy as cp
import numpy as np

from gradcraft.backend.cuda import launch as L
from gradcraft.backend.cuda import rows as R
from gradcraft.backend.cuda.launch import f64, i32, i64, ptr


def softmax_rows(x, scale=1.0, mask=None, causal=False, window=None, T=1, S=1, log=False):
    """Row softmax of x (..., C) * scale (+ float32 additive mask of x's shape), attention masking fused."""
    x = L.as_contiguous(x)
    mask = None if mask is None else L.as_contiguous(mask, np.float32)
    C = x.shape[-1]
    rows = x.size // max(C, 1)
    y = L.empty(x.shape, x.dtype)
    if rows and C:
        flags = (i32(bool(causal)), i32(window or 0), i32(T), i32(S), i32(bool(log)))
        args = (x, y, i64(rows), i32(C), f64(scale), ptr(mask), *flags)
        R.run("softmax.cu", "softmax_fwd", rows, C, (x, y, mask), R.SOFTMAX_E, args)
    return y


def softmax_rows_backward(y, g, scale=1.0, log=False):
    """dx of y = softmax(x * scale) (scale * y * (g - sum(g * y))) or of y = log_softmax(x) (log)."""
    y, g = L.as_contiguous(y), L.as_contiguous(g, y.dtype)
    C = y.shape[-1]
    rows = y.size // max(C, 1)
    dx = L.empty(y.shape, y.dtype)
    if rows and C:
        args = (y, g, dx, i64(rows), i32(C), f64(scale), i32(bool(log)))
        R.run("softmax.cu", "softmax_bwd", rows, C, (y, g, dx), R.SOFTMAX_E, args)
    return dx


def softmax(x, axis):
    return R.last_axis(softmax_rows, x, axis)


def log_softmax(x, axis):
    return R.last_axis(lambda a: softmax_rows(a, log=True), x, axis)


def softmax_backward(y, g, axis):
    return R.last_axis(softmax_rows_backward, y, axis, g)


def log_softmax_backward(y, g, axis):
    return R.last_axis(lambda a, b: softmax_rows_backward(a, b, log=True), y, axis, g)


def masked_softmax(scores, mask=None, *, scale, causal, window):
    """Attention weights from raw scores (..., T, S): scale, masks and softmax in one kernel."""
    T, S = scores.shape[-2:]
    additive = None
    if mask is not None:
        m = cp.broadcast_to(mask, scores.shape)
        if m.dtype == np.bool_:  # one float32 pass (Python floats would make a float64 array first)
            additive = cp.where(m, np.float32(0), np.float32(-np.inf)).astype(np.float32, copy=False)
        else:
            additive = m.astype(np.float32)
        additive = L.contiguous(additive)
    return softmax_rows(scores, scale, additive, causal, window, T, S)


def masked_softmax_backward(p, g, *, scale):
    return softmax_rows_backward(p, g, scale)


KERNELS = {
    "softmax": softmax,
    "softmax_backward": softmax_backward,
    "log_softmax": log_softmax,
    "log_softmax_backward": log_softmax_backward,
    "masked_softmax": masked_softmax,
    "masked_softmax_backward": masked_softmax_backward,
}
