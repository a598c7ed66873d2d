"""Reductions over axes (sum, max, min, argmax, argmin), cumsum and topk, and a greedy
decoding step's argmax that feeds itself (greedy_advance) (cuda/kernels/reduce.cu)."""

import numpy as np

from gradcraft.backend.cpu.common import _HALF, _finish, _wide, stats


def _reduce(fn):
    def kernel(a, axes, keepdim):
        w = _wide(a)
        return _finish(np.asarray(fn(w, axis=axes, keepdims=keepdim)), a.dtype)

    return kernel


def _sum(a, axes, keepdim):
    w = _wide(a)
    # bool/int sums accumulate in int64, as in PyTorch
    dtype = np.int64 if a.dtype.kind in "biu" else w.dtype
    result = np.asarray(np.sum(w, axis=axes, keepdims=keepdim, dtype=dtype))
    return _finish(result, np.int64 if a.dtype.kind in "biu" else a.dtype)


def _arg(fn):
    def kernel(a, axis, keepdim):
        w = _wide(a)
        if axis is None:
            result = np.asarray(fn(w.reshape(-1)), dtype=np.int64)
            return stats.track(result.reshape((1,) * a.ndim) if keepdim else result)
        result = np.asarray(fn(w, axis=axis), dtype=np.int64)
        return stats.track(np.expand_dims(result, axis).copy() if keepdim else result)

    return kernel


def _greedy_advance(logits, ids, position):
    """A greedy decoding step's pick: each row's argmax of logits (B, V), written into ids (B elements)
    as the next step's input tokens, and position (1 or B elements) moved on by one, in place."""
    best = np.asarray(np.argmax(_wide(logits), axis=-1), dtype=np.int64)
    ids[...] = best.reshape(ids.shape)
    position += 1
    return stats.track(best)


def _cumsum(a, axis, reverse):
    w = _wide(a)
    if reverse:
        result = np.flip(np.cumsum(np.flip(w, axis), axis=axis), axis)
    else:
        result = np.cumsum(w, axis=axis)
    floating = a.dtype.kind == "f" or a.dtype in _HALF  # (bfloat16's NumPy kind is "V")
    return _finish(np.ascontiguousarray(result), a.dtype if floating else np.int64)


def _topk(a, k, axis, largest):
    """Indices of the k largest (or smallest) along axis, in sorted order; ties keep the lower index."""
    key = -_wide(a) if largest else _wide(a)
    order = np.argsort(key, axis=axis, kind="stable")
    return stats.track(np.ascontiguousarray(np.take(order, np.arange(k), axis=axis)).astype(np.int64))


KERNELS = {
    "sum": _sum,
    "max": _reduce(np.max),
    "min": _reduce(np.min),
    "argmax": _arg(np.argmax),
    "argmin": _arg(np.argmin),
    "greedy_advance": _greedy_advance,
    "cumsum": _cumsum,
    "topk": _topk,
}
