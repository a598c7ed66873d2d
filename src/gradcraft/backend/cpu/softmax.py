"""Softmax, log-softmax and the attention weights' masked softmax, with their gradients
(cuda/kernels/softmax.cu)."""

import functools

import numpy as np

from gradcraft.backend.cpu.common import _HALF, _finish, _last_axis_rows, _out, _wide
from gradcraft.backend.cpu.threads import _into, _parallel, _rowwise


def _rows_into(compute, like, *inputs):
    """A new array of like's shape and dtype: compute(o, *float blocks of inputs) over blocks of whole
    rows (the last axis), on several threads; o is the float block it writes (_into: half precision
    rounds once)."""

    def block(out, *blocks):
        _into(out, lambda o: compute(o, *(_wide(b) for b in blocks)))

    out = _out(like.shape, like.dtype)
    _rowwise(block, *_last_axis_rows(out, *inputs), inner=1)
    return out


def _softmax(x, axis):
    if axis != x.ndim - 1:  # rows along another axis: one pass per step, on one thread
        w = _wide(x)
        out = np.subtract(w, w.max(axis=axis, keepdims=True), dtype=w.dtype)
        np.exp(out, out=out)
        out /= out.sum(axis=axis, keepdims=True)
        return _finish(out, x.dtype)

    def compute(o, w):
        np.subtract(w, w.max(axis=-1, keepdims=True), out=o)
        np.exp(o, out=o)
        o /= o.sum(axis=-1, keepdims=True)

    return _rows_into(compute, x, x)


def _softmax_backward(y, g, axis):
    if axis != y.ndim - 1:
        wy, wg = _wide(y), _wide(g)
        return _finish(wy * (wg - (wg * wy).sum(axis=axis, keepdims=True)), y.dtype)

    def compute(o, wy, wg):
        np.multiply(wg, wy, out=o)
        row = o.sum(axis=-1, keepdims=True)
        np.subtract(wg, row, out=o)
        o *= wy

    return _rows_into(compute, y, y, g)


def _log_softmax(x, axis):
    if axis != x.ndim - 1:
        w = _wide(x)
        out = np.subtract(w, w.max(axis=axis, keepdims=True), dtype=w.dtype)
        out -= np.log(np.exp(out).sum(axis=axis, keepdims=True))
        return _finish(out, x.dtype)

    def compute(o, w):
        np.subtract(w, w.max(axis=-1, keepdims=True), out=o)
        o -= np.log(np.exp(o).sum(axis=-1, keepdims=True))

    return _rows_into(compute, x, x)


def _log_softmax_backward(y, g, axis):
    if axis != y.ndim - 1:
        wy, wg = _wide(y), _wide(g)
        return _finish(wg - np.exp(wy) * wg.sum(axis=axis, keepdims=True), y.dtype)

    def compute(o, wy, wg):
        np.exp(wy, out=o)
        o *= -wg.sum(axis=-1, keepdims=True)  # wg - exp(y) * sum(wg), sign moved: exact
        o += wg

    return _rows_into(compute, y, y, g)


def _masked_softmax(scores, mask=None, *, scale, causal, window):
    """Attention weights from raw scores (..., T, S): softmax(scores * scale + masks) over the last axis.
    mask: bool (True = may attend) or additive, broadcastable to scores. Block by block of (T, S)
    matrices, in place in the output, on several threads."""
    T, S = scores.shape[-2:]
    n = scores.size // max(T * S, 1)
    out = _out(scores.shape, scores.dtype)
    heads, out_heads = scores.reshape(n, T, S), out.reshape(n, T, S)
    if mask is not None:
        mask = np.broadcast_to(mask, scores.shape).reshape(n, T, S)  # copies only a mask with fewer dims
    position = (
        _position_mask(T, S, causal, window, np.float32 if scores.dtype in _HALF else scores.dtype)
        if causal or window
        else None
    )

    def block(lo, hi):
        def compute(o):
            w = _wide(heads[lo:hi])
            np.multiply(w, w.dtype.type(scale), out=o)
            if mask is not None:
                m = mask[lo:hi]
                if m.dtype == np.bool_:
                    np.copyto(o, -np.inf, where=~m)
                else:
                    o += _wide(m)
            if position is not None:
                o += position
            o -= o.max(axis=-1, keepdims=True)
            np.exp(o, out=o)
            o /= o.sum(axis=-1, keepdims=True)

        _into(out_heads[lo:hi], compute)

    _parallel(block, n, T * S)
    return out


def _masked_softmax_backward(p, g, *, scale):
    """d scores = p * (g - rowsum(g * p)) * scale, block by block of rows."""

    def compute(o, wp, wg):
        np.subtract(wg, np.einsum("...s,...s->...", wg, wp)[..., None], out=o)
        o *= wp
        o *= o.dtype.type(scale)

    return _rows_into(compute, p, p, g)


@functools.lru_cache(maxsize=32)
def _position_mask(T, S, causal, window, dtype):
    """Additive (T, S) mask: 0 where query i (the last T of S positions) may see key j, -inf elsewhere.
    Cached: a training run asks for the same few shapes every step (callers must not modify it)."""
    i = np.arange(T)[:, None] + (S - T)
    j = np.arange(S)[None, :]
    allowed = j <= i if causal else np.ones((T, S), bool)
    if window:
        allowed = allowed & (j > i - window)
    mask = np.zeros((T, S), dtype=dtype)
    mask[~allowed] = -np.inf
    return mask


KERNELS = {
    "softmax": _softmax,
    "softmax_backward": _softmax_backward,
    "log_softmax": _log_softmax,
    "log_softmax_backward": _log_softmax_backward,
    "masked_softmax": _masked_softmax,
    "masked_softmax_backward": _masked_softmax_backward,
}
