"""Elementwise kernels: unary maths, binary arithmetic with NumPy broadcasting, comparisons,
casts and where (cuda/kernels/elementwise.cu)."""

import numpy as np

from gradcraft.backend.integer import integer_pow
from gradcraft.backend.cpu.common import _HALF, _finish, _out, _wide, stats
from gradcraft.backend.cpu.threads import _map


def _sigmoid(w, out=None):
    # 0.5 * (1 + tanh(x / 2)): one transcendental, no overflow, no np.where (slow on big arrays).
    out = np.empty(w.shape, w.dtype) if out is None else out
    np.multiply(w, 0.5, out=out)
    np.tanh(out, out=out)
    out *= 0.5
    out += 0.5
    return out


def _unary(fn):
    def kernel(a):
        w = _wide(a)
        out = _out(w.shape, w.dtype)
        _map(fn, out, w)
        return _finish(out, a.dtype) if w is not a else out

    return kernel


def _binary(fn):
    def kernel(a, b):
        wa, wb = _wide(a), _wide(b)
        shape = wa.shape if wa.shape == wb.shape else np.broadcast_shapes(wa.shape, wb.shape)
        dtype = wa.dtype if wa.dtype == wb.dtype else np.result_type(wa, wb)
        out = _out(shape, dtype)
        _map(fn, out, wa, wb)
        return _finish(out, a.dtype) if wa is not a else out

    return kernel


def _compare(fn):
    def kernel(a, b):
        out = _out(np.broadcast_shapes(a.shape, b.shape), np.bool_)
        _map(fn, out, _wide(a), _wide(b))
        return out

    return kernel


def _pow(a, b):
    wa, wb = _wide(a), _wide(b)
    if wa.dtype.kind in "iu" and wb.dtype.kind in "iu" and np.any(wb < 0):
        return _finish(integer_pow(np, wa, wb), a.dtype)
    return _finish(np.power(wa, wb), a.dtype)


def _rsqrt(a):
    w = _wide(a)
    return _finish(1.0 / np.sqrt(w), a.dtype)


def _cast(a, dtype):
    out = _out(a.shape, dtype)
    out[...] = a if a.dtype not in _HALF or np.dtype(dtype).kind == "f" else a.astype(np.float32)
    return out


def _where(cond, a, b):
    return _finish(np.where(cond, a, b), np.result_type(a, b))


KERNELS = {
    "neg": _unary(np.negative),
    "exp": _unary(np.exp),
    "log": _unary(np.log),
    "sqrt": _unary(np.sqrt),
    "rsqrt": _rsqrt,
    "abs": _unary(np.abs),
    "sin": _unary(np.sin),
    "cos": _unary(np.cos),
    "tanh": _unary(np.tanh),
    "relu": lambda a: _finish(np.maximum(a, 0), a.dtype),
    "sigmoid": lambda a: _finish(_sigmoid(_wide(a)), a.dtype),
    "sign": _unary(np.sign),
    "logical_not": lambda a: stats.track(np.logical_not(a)),
    "asin": _unary(np.arcsin),
    "acos": _unary(np.arccos),
    "atan": _unary(np.arctan),
    "asinh": _unary(np.arcsinh),
    "acosh": _unary(np.arccosh),
    "atanh": _unary(np.arctanh),
    "sinh": _unary(np.sinh),
    "cosh": _unary(np.cosh),
    "cast": _cast,
    "add": _binary(np.add),
    "sub": _binary(np.subtract),
    "mul": _binary(np.multiply),
    "div": _binary(np.true_divide),
    "pow": _pow,
    "maximum": _binary(np.maximum),
    "minimum": _binary(np.minimum),
    "logaddexp": _binary(np.logaddexp),
    "atan2": _binary(np.arctan2),
    "hypot": _binary(np.hypot),
    "eq": _compare(np.equal),
    "ne": _compare(np.not_equal),
    "lt": _compare(np.less),
    "le": _compare(np.less_equal),
    "gt": _compare(np.greater),
    "ge": _compare(np.greater_equal),
    "where": _where,
}
