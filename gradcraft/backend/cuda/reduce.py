"""Reductions (kernels/reduce.cu over trailing axes, a cuBLAS product over leading ones, CuPy
otherwise), cumsum and topk."""

import functools

import cupy as cp

import numpy as np

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


def _arg(kind, fn):
    def kernel(a, axis, keepdim):
        if a.dtype in L.FLOAT and a.ndim and a.size and axis is not None and axis % a.ndim == a.ndim - 1:
            # over the last axis (a decoding step's greedy pick over the vocabulary): one block per row
            a = L.contiguous(a)
            C = a.shape[-1]
            out = L.empty(a.shape[:-1], np.int64)
            L.run("reduce.cu", f"{kind}_last_{L.suffix(a.dtype)}", a.size // C, L.row_threads(C), (a, out, L.i32(C)))
            return cp.expand_dims(out, -1) if keepdim else out
        w = L.wide(a)
        if axis is None:
            result = fn(w.reshape(-1)).astype(np.int64)
            return result.reshape((1,) * a.ndim) if keepdim else result
        result = fn(w, axis=axis).astype(np.int64)
        return cp.expand_dims(result, axis) if keepdim else result

    return kernel


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
    "cumsum": _cumsum,
    "topk": _topk,
}
