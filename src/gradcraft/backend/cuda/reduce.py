"""Reductions (kernels/reduce.cu over trailing axes, a cuBLAS product over leading ones, CuPy
otherwise), cumsum and topk."""

import functools

import cupy as cp

import numpy as np

from gradcraft.backend.cuda import compiler
from gradcraft.backend.cuda import launch as L
from gradcraft.backend.cuda.matmul import gemm


def _trailing(a, axes):
    """The number of trailing axes `axes` names when they are exactly the last ones, else None."""
    if axes is None:
        return a.ndim
    axes = sorted({ax % a.ndim for ax in ((axes,) if isinstance(axes, int) else axes)})
    k = len(axes)
    return k if axes == list(range(a.ndim - k, a.ndim)) else None


def _reduce_rows(kind, a, k, keepdim):
    """reduce.cu over the trailing k axes of a float array (one block per output element)."""
    a = L.contiguous(a)
    C = int(np.prod(a.shape[a.ndim - k :], dtype=np.int64))
    rows = a.size // C
    out = L.empty(a.shape[: a.ndim - k], a.dtype)
    if rows:
        L.run("reduce.cu", f"reduce_{kind}_{L.suffix(a.dtype)}", rows, L.row_threads(C), (a, out, L.i32(C)))
    return out.reshape(a.shape[: a.ndim - k] + (1,) * k) if keepdim else out


def _leading(a, axes) -> int:
    """k when axes are exactly the first k dims of a C-contiguous a (0 otherwise)."""
    k = len(axes)
    return k if a.ndim and k < a.ndim and tuple(axes) == tuple(range(k)) and a.flags.c_contiguous else 0


def _sum_leading(a, k, keepdim):
    """Sum over the leading k dims (a bias gradient: (B*T, C) -> (C,)) as ones(1, rows) @ a(rows, C): one
    cuBLAS GEMV-shaped product, memory bound, instead of a strided column reduction."""
    C = int(np.prod(a.shape[k:], dtype=np.int64))
    rows = a.size // C
    ones = _ones(rows, a.dtype)
    out = gemm(ones, a.reshape(rows, C), allow_tf32=False).reshape(a.shape[k:])  # sums stay fp32-exact
    return out.reshape((1,) * k + a.shape[k:]) if keepdim else out


@functools.lru_cache(maxsize=32)
def _ones(rows: int, dtype) -> cp.ndarray:
    return cp.ones((1, rows), dtype=dtype)


def _reduction(kind, fn):
    def kernel(a, axes, keepdim):
        k = _trailing(a, axes) if a.ndim else None
        if a.dtype in L.FLOAT and k and a.size and all(a.shape):
            return _reduce_rows(kind, a, k, keepdim)
        lead = _leading(a, axes) if kind == "sum" and a.dtype in (np.float32, np.dtype("bfloat16"), np.float16) else 0
        if lead and a.size and all(a.shape):
            return _sum_leading(a, lead, keepdim)
        w = L.wide(a)
        if kind == "sum" and a.dtype.kind in "biu":
            return fn(w, axis=axes, keepdims=keepdim, dtype=np.int64)
        return L.finish(cp.asarray(fn(w, axis=axes, keepdims=keepdim)), a.dtype)

    return kernel


# A row this long or longer, among fewer rows than the GPU has multiprocessors, is split over several
# blocks (kernels/reduce.cu's arg_split_body): a decoding step's argmax over a vocabulary.
SPLIT_MIN = 8192
SPLIT_THREADS = 256
_SPLIT_CHUNK = 4096  # values a block of the split kernel takes, at least (two 16-byte words a thread in bf16)


def _arg_last(kind, a, ids=None, position=None):
    """argmax/argmin over the last axis of a contiguous float array: (rows,) int64, written into ids and
    with position moved on by one as well where they are given (greedy_advance)."""
    C = a.shape[-1]
    rows = a.size // C
    out = L.empty(a.shape[:-1], np.int64)
    suffix = L.suffix(a.dtype)
    extra = (L.ptr(ids), L.ptr(position), L.i32(0 if position is None else position.size))
    splits = min(-(-C // _SPLIT_CHUNK), max(1, 2 * L.sm_count() // rows), 32)  # (one warp merges the splits)
    if C < SPLIT_MIN or rows >= L.sm_count() or splits < 2:
        L.run("reduce.cu", f"{kind}_last_{suffix}", rows, L.row_threads(C), (a, out, L.i32(C)) + extra)
        return out
    chunk = -(-C // splits)
    chunk = -(-chunk // 64) * 64  # (chunks start 16-byte aligned where the row does)
    splits = -(-C // chunk)
    part_v = L.empty((rows * splits,), L.acc_dtype(a.dtype))
    part_i = L.empty((rows * splits,), np.int32)
    counters = L.block_counters(rows)  # (at 0 between launches)
    fn = compiler.function("reduce.cu", f"{kind}_split_{suffix}", cp.cuda.Device().id)
    fn((splits, rows), (SPLIT_THREADS,), (a, out, L.i32(C), L.i32(chunk), part_v, part_i, counters) + extra)
    return out


def _arg(kind, fn):
    def kernel(a, axis, keepdim):
        if a.dtype in L.FLOAT and a.ndim and a.size and axis is not None and axis % a.ndim == a.ndim - 1:
            # over the last axis (a decoding step's greedy pick over the vocabulary)
            out = _arg_last(kind, L.contiguous(a))
            return cp.expand_dims(out, -1) if keepdim else out
        w = L.wide(a)
        if axis is None:
            result = fn(w.reshape(-1)).astype(np.int64)
            return result.reshape((1,) * a.ndim) if keepdim else result
        result = fn(w, axis=axis).astype(np.int64)
        return cp.expand_dims(result, axis) if keepdim else result

    return kernel


def _greedy_advance(logits, ids, position):
    """backend/cpu/reduce.py's: each row's argmax into ids, position + 1, in the argmax kernel itself (a
    decoding step's tail, which took an argmax, two copies and an add)."""
    if logits.dtype in L.FLOAT and logits.size and ids.flags.c_contiguous and position.flags.c_contiguous:
        return _arg_last("argmax", L.contiguous(logits), ids, position)
    best = cp.argmax(L.wide(logits), axis=-1).astype(np.int64)
    ids[...] = best.reshape(ids.shape)
    position += 1
    return best


def _cumsum(a, axis, reverse):
    w = L.wide(a)
    floating = a.dtype in L.FLOAT  # (bfloat16's NumPy kind is "V", not "f")
    dtype = w.dtype if floating else np.int64
    if reverse:
        result = cp.flip(cp.cumsum(cp.flip(w, axis), axis=axis, dtype=dtype), axis)
    else:
        result = cp.cumsum(w, axis=axis, dtype=dtype)
    return L.finish(L.contiguous(result), a.dtype if floating else np.int64)


def _topk(a, k, axis, largest):
    """Indices of the k largest (or smallest) along axis, sorted; ties keep the lower index (stable sort)."""
    key = -L.wide(a) if largest else L.wide(a)
    order = cp.argsort(key, axis=axis)
    return L.contiguous(cp.take(order, cp.arange(k), axis=axis)).astype(np.int64)


KERNELS = {
    "sum": _reduction("sum", cp.sum),
    "max": _reduction("max", cp.max),
    "min": _reduction("min", cp.min),
    "argmax": _arg("argmax", cp.argmax),
    "argmin": _arg("argmin", cp.argmin),
    "greedy_advance": _greedy_advance,
    "cumsum": _cumsum,
    "topk": _topk,
}
