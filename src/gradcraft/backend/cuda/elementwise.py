"""Elementwise kernels: CuPy routines, and kernels/elementwise.cu's one-pass binary ops for the
common layouts; float16/bfloat16 arithmetic runs in float32 and rounds once (as backend/cpu/)."""

import cupy as cp

import numpy as np

from gradcraft.backend.cuda import launch as L
from gradcraft.backend.integer import integer_pow

HALF = L.HALF


def _unary(fn):
    def kernel(a):
        return L.finish(fn(L.wide(a)), a.dtype)

    return kernel


def _sigmoid(w):
    return cp.exp(-cp.logaddexp(0.0, -w)).astype(w.dtype, copy=False)


_FAST_BINARY = {"add", "sub", "mul", "div", "maximum", "minimum"}
_BINARY_UNROLL = 2  # 16-byte accesses in flight per array and thread (elementwise.cu's U)


def _binary_one_pass(name, a, b):
    """elementwise.cu over contiguous a and b of one float dtype, b's values repeating along a's leading
    axes (b_n = b.size divides n = a.size: a's own shape, a bias, or one value). The `_v` kernel moves
    16 bytes per access where a, out (and b, unless it is one value) are 16-byte aligned and a repeated
    b's size is a multiple of the values per access; the one-value kernel otherwise."""
    out = L.empty(a.shape, a.dtype)
    n, b_n = a.size, b.size
    if not n:
        return out
    sfx = L.suffix(a.dtype)
    per_access = 16 // a.dtype.itemsize
    if b_n == 1:
        vector = L.aligned(a, out)
    else:
        vector = (b_n == n or (b_n % per_access == 0 and b_n < 2**31)) and L.aligned(a, b, out)
    if vector:
        # A grid-stride loop over n // per_access accesses; at most 16 blocks of 256 an SM: several waves
        # at the 4..6 blocks an SM these kernels' registers allow, so a last partial wave costs little.
        blocks = min(L.grid_1d(n // per_access, 256, _BINARY_UNROLL), 16 * L.sm_count())
        L.run("elementwise.cu", f"{name}_v_{sfx}", blocks, 256, (a, b, out, L.i64(n), L.i64(b_n)))
    else:
        L.run("elementwise.cu", f"{name}_{sfx}", L.grid_1d(n, 256, 4), 256, (a, b, out, L.i64(n), L.i64(b_n)))
    return out


def _binary(name, fn):
    def kernel(a, b):
        if (
            name in _FAST_BINARY
            and a.dtype in L.FLOAT
            and b.dtype == a.dtype
            and a.flags.c_contiguous
            and b.flags.c_contiguous
            and b.ndim <= a.ndim
            and b.size
            and (b.size == 1 or a.shape[a.ndim - b.ndim :] == b.shape)
        ):
            # One pass for the common cases: same shape, a bias along the last axes, or times a
            # scalar (b's values repeat along a's leading axes).
            return _binary_one_pass(name, a, b)
        wa, wb = L.wide(a), L.wide(b)
        out = fn(wa, wb)
        return L.finish(out, a.dtype) if a.dtype in HALF else out

    return kernel


def _compare(fn):
    def kernel(a, b):
        return fn(L.wide(a), L.wide(b))

    return kernel


def _pow(a, b):
    if a.dtype.kind in "iu" and b.dtype.kind in "iu":
        return L.finish(integer_pow(cp, a, b), a.dtype)
    return L.finish(cp.power(L.wide(a), L.wide(b)), a.dtype)


def _rsqrt(a):
    return L.finish(1.0 / cp.sqrt(L.wide(a)), a.dtype)


def _cast(a, dtype):
    dtype = np.dtype(dtype)
    if a.dtype in HALF and dtype not in L.FLOAT:
        a = a.astype(np.float32)
    return a.astype(dtype)


def _where(cond, a, b):
    dtype = np.result_type(a, b)
    a, b = a.astype(dtype, copy=False), b.astype(dtype, copy=False)
    if dtype in HALF:  # select the 16-bit patterns: no arithmetic needed
        return cp.where(cond, a.view(np.uint16), b.view(np.uint16)).view(dtype)
    return cp.where(cond, a, b)


KERNELS = {
    "neg": _unary(cp.negative),
    "exp": _unary(cp.exp),
    "log": _unary(cp.log),
    "sqrt": _unary(cp.sqrt),
    "rsqrt": _rsqrt,
    "abs": _unary(cp.abs),
    "sin": _unary(cp.sin),
    "cos": _unary(cp.cos),
    "tanh": _unary(cp.tanh),
    "relu": lambda a: L.finish(cp.maximum(L.wide(a), 0), a.dtype),
    "sigmoid": lambda a: L.finish(_sigmoid(L.wide(a)), a.dtype),
    "sign": _unary(cp.sign),
    "logical_not": cp.logical_not,
    "asin": _unary(cp.arcsin),
    "acos": _unary(cp.arccos),
    "atan": _unary(cp.arctan),
    "asinh": _unary(cp.arcsinh),
    "acosh": _unary(cp.arccosh),
    "atanh": _unary(cp.arctanh),
    "cast": _cast,
    "add": _binary("add", cp.add),
    "sub": _binary("sub", cp.subtract),
    "mul": _binary("mul", cp.multiply),
    "div": _binary("div", cp.true_divide),
    "pow": _pow,
    "maximum": _binary("maximum", cp.maximum),
    "minimum": _binary("minimum", cp.minimum),
    "atan2": _binary("atan2", cp.arctan2),
    "eq": _compare(cp.equal),
    "ne": _compare(cp.not_equal),
    "lt": _compare(cp.less),
    "le": _compare(cp.less_equal),
    "gt": _compare(cp.greater),
    "ge": _compare(cp.greater_equal),
    "where": _where,
}
