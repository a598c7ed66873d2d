"""The CPU backend: every kernel of the contract, written with NumPy.

These are also the reference implementations: each CUDA kernel is tested
against the function of the same name here.

float16 and bfloat16 arithmetic runs in float32 and rounds once at the end, as
GPUs do; NumPy's own half-precision loops are slow and round every step.
"""

import ctypes
import functools
import math
import os
import sys

import numpy as np

from gradcraft.backend import Backend, KERNELS
from gradcraft.engine.memory import CPUPool, stats

_pool = CPUPool(stats)
_HALF = {np.dtype(np.float16), np.dtype("bfloat16")}


def _wide(a: np.ndarray) -> np.ndarray:
    """float32 view of the computation for half-precision inputs."""
    return a.astype(np.float32) if a.dtype in _HALF else a


def _out(shape, dtype) -> np.ndarray:
    return _pool.empty(shape, dtype)


def _finish(result: np.ndarray, dtype) -> np.ndarray:
    """Cast a float32 result back to a half dtype, into a pooled buffer."""
    result = np.asarray(result)
    if result.dtype == dtype:
        return stats.track(result) if result.base is None else result
    out = _out(result.shape, dtype)
    out[...] = result
    return out


# ---------------------------------------------------------------- elementwise

def _erf(x: np.ndarray) -> np.ndarray:
    if x.dtype == np.float64:
        return np.vectorize(math.erf, otypes=[np.float64])(x)
    # Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7, below float32 resolution of gelu's output).
    t = 1.0 / (1.0 + 0.3275911 * np.abs(x))
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return np.sign(x) * (1.0 - poly * np.exp(-x * x))


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _gelu(x, approximate="none"):
    w = _wide(x)
    if approximate == "tanh":
        y = 0.5 * w * (1.0 + np.tanh(_SQRT_2_OVER_PI * (w + 0.044715 * w ** 3)))
    else:
        y = 0.5 * w * (1.0 + _erf(w / math.sqrt(2.0)))
    return _finish(y.astype(w.dtype, copy=False), x.dtype)


def _gelu_backward(x, g, approximate="none"):
    w, gw = _wide(x), _wide(g)
    if approximate == "tanh":
        inner = _SQRT_2_OVER_PI * (w + 0.044715 * w ** 3)
        t = np.tanh(inner)
        d = 0.5 * (1.0 + t) + 0.5 * w * (1.0 - t * t) * _SQRT_2_OVER_PI * (1.0 + 3 * 0.044715 * w * w)
    else:
        cdf = 0.5 * (1.0 + _erf(w / math.sqrt(2.0)))
        d = cdf + w * np.exp(-0.5 * w * w) / math.sqrt(2.0 * math.pi)
    return _finish((gw * d).astype(w.dtype, copy=False), x.dtype)


def _sigmoid(w):
    # 0.5 * (1 + tanh(x / 2)): one transcendental, no overflow, no np.where (slow on big arrays).
    out = np.empty(w.shape, w.dtype)
    np.multiply(w, 0.5, out=out)
    np.tanh(out, out=out)
    out *= 0.5
    out += 0.5
    return out


def _unary(fn):
    def kernel(a):
        w = _wide(a)
        out = _out(w.shape, w.dtype)
        fn(w, out=out)
        return _finish(out, a.dtype) if w is not a else out
    return kernel


def _silu(x):
    w = _wide(x)
    out = _sigmoid(w)
    out *= w
    return _finish(out, x.dtype)


def _silu_backward(x, g):
    # d/dx x*s(x) = s * (1 + x * (1 - s)), computed in place
    w, gw = _wide(x), _wide(g)
    s = _sigmoid(w)
    d = np.empty(s.shape, s.dtype)
    np.subtract(1.0, s, out=d)
    d *= w
    d += 1.0
    d *= s
    d *= gw
    return _finish(d, x.dtype)


def _binary(fn):
    def kernel(a, b):
        wa, wb = _wide(a), _wide(b)
        shape = np.broadcast_shapes(wa.shape, wb.shape)
        out = _out(shape, np.result_type(wa, wb))
        fn(wa, wb, out=out)
        return _finish(out, a.dtype) if wa is not a else out
    return kernel


def _compare(fn):
    def kernel(a, b):
        out = _out(np.broadcast_shapes(a.shape, b.shape), np.bool_)
        fn(_wide(a), _wide(b), out=out)
        return out
    return kernel


def _pow(a, b):
    wa, wb = _wide(a), _wide(b)
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


# ---------------------------------------------------------------- reductions

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


# ---------------------------------------------------------------- matmul

def _matmul(a, b):
    wa, wb = _wide(a), _wide(b)
    if wb.ndim == 2:
        # (..., M, K) @ (K, N): one BLAS call on (batch*M, K); NumPy would loop over the batch.
        rows = wa.reshape(-1, wa.shape[-1])
        out = _out((rows.shape[0], wb.shape[1]), np.result_type(wa, wb))
        np.matmul(rows, wb, out=out)
        out = out.reshape(wa.shape[:-1] + (wb.shape[1],))
        return _finish(out, a.dtype) if wa is not a else out
    return _finish(np.matmul(wa, wb), a.dtype)


# ---------------------------------------------------------------- movement (views)

def _reshape(a, shape):
    return np.reshape(a, shape)


def _slice(a, slices):
    return a[tuple(slice(*s) for s in slices)]


def _contiguous(a):
    out = _out(a.shape, a.dtype)
    out[...] = a
    return out


def _index_tuple(indices, spec):
    return tuple(indices[item] if isinstance(item, int) else slice(*item) for item in spec)


def _index(a, *indices, spec):
    return stats.track(np.ascontiguousarray(a[_index_tuple(indices, spec)]))


def _index_put_add(g, *indices, spec, shape):
    out = _out(shape, _wide(g).dtype)
    out.fill(0)
    index = _index_tuple(indices, spec)
    if indices:
        np.add.at(out, index, _wide(g))  # gathered positions may repeat: accumulate
    else:
        out[index] = _wide(g)  # plain slices never overlap
    return _finish(out, g.dtype)


def _take_along_dim(a, idx, axis):
    return stats.track(np.take_along_axis(a, idx, axis=axis))


def _scatter_add_along_dim(g, idx, axis, shape):
    out = np.zeros(shape, dtype=_wide(g).dtype)
    # add.at with full open-mesh indices: take_along_axis's inverse, accumulating repeats.
    grids = list(np.ix_(*[np.arange(n) for n in idx.shape]))
    grids[axis] = idx
    np.add.at(out, tuple(grids), _wide(g))
    return _finish(out, g.dtype)


def _cat(*arrays, axis):
    return stats.track(np.concatenate(arrays, axis=axis))


def _pad(a, pads, value):
    return stats.track(np.pad(a, pads, constant_values=value))


def _tril(a, diagonal):
    return stats.track(np.tril(a, diagonal))


def _triu(a, diagonal):
    return stats.track(np.triu(a, diagonal))


# ---------------------------------------------------------------- creation

def _full(shape, value, dtype):
    out = _out(shape, dtype)
    out.fill(value)
    return out


def _arange(start, stop, step, dtype, shape):
    return stats.track(np.arange(start, stop, step).astype(dtype))


def _generator(seed):
    # Counter-based: the same seed gives the same numbers, so recomputing a lazy random tensor is exact.
    return np.random.Generator(np.random.Philox(key=seed))


def _rand(shape, seed, dtype):
    return _finish(_generator(seed).random(shape, dtype=np.float64).astype(np.float32)
                   if np.dtype(dtype) != np.float64 else _generator(seed).random(shape), dtype)


def _randn(shape, seed, dtype):
    return _finish(_generator(seed).standard_normal(shape).astype(np.dtype(dtype) if np.dtype(dtype) not in _HALF
                                                                      else np.float32), dtype)


def _randint(shape, low, high, seed, dtype):
    return stats.track(_generator(seed).integers(low, high, size=shape).astype(dtype))


def _copy_from(a, source_backend):
    return stats.track(np.array(source_backend.to_numpy(a), copy=True))


def _assign(target, value):
    target[...] = value
    return target


# ---------------------------------------------------------------- fused NN ops

def _softmax(x, axis):
    w = _wide(x)
    out = np.subtract(w, w.max(axis=axis, keepdims=True), dtype=w.dtype)
    np.exp(out, out=out)
    out /= out.sum(axis=axis, keepdims=True)
    return _finish(out, x.dtype)


def _softmax_backward(y, g, axis):
    wy, wg = _wide(y), _wide(g)
    return _finish(wy * (wg - (wg * wy).sum(axis=axis, keepdims=True)), y.dtype)


def _log_softmax(x, axis):
    w = _wide(x)
    out = np.subtract(w, w.max(axis=axis, keepdims=True), dtype=w.dtype)
    out -= np.log(np.exp(out).sum(axis=axis, keepdims=True))
    return _finish(out, x.dtype)


def _log_softmax_backward(y, g, axis):
    wy, wg = _wide(y), _wide(g)
    return _finish(wg - np.exp(wy) * wg.sum(axis=axis, keepdims=True), y.dtype)


_CE_BLOCK_ROWS = 64  # rows per block: the block's temporaries stay in cache


def _cross_entropy(logits, target, ignore_index, label_smoothing):
    """Per-row loss of (N, C) logits against (N,) class ids; ignored rows give 0.

    loss = logsumexp(x) - x[target]; with smoothing eps: (1 - eps) * that + eps * (logsumexp(x) - mean(x)).
    Computed block by block of rows, so the exp temporaries stay in cache.
    """
    w = _wide(logits)
    n = w.shape[0]
    loss = np.empty(n, dtype=w.dtype)
    valid = target != ignore_index
    safe = np.where(valid, target, 0)
    block = np.empty((min(_CE_BLOCK_ROWS, n), w.shape[1]), dtype=w.dtype)
    for start in range(0, n, _CE_BLOCK_ROWS):
        rows = w[start:start + _CE_BLOCK_ROWS]
        tmp = block[:len(rows)]
        peak = rows.max(axis=1)
        np.subtract(rows, peak[:, None], out=tmp)
        picked = tmp[np.arange(len(rows)), safe[start:start + len(rows)]]
        mean_shifted = tmp.mean(axis=1) if label_smoothing else None
        np.exp(tmp, out=tmp)
        lse = np.log(tmp.sum(axis=1))
        nll = lse - picked
        if label_smoothing:
            nll = (1.0 - label_smoothing) * nll + label_smoothing * (lse - mean_shifted)
        loss[start:start + len(rows)] = nll
    loss[~valid] = 0.0
    return _finish(loss, logits.dtype)


def _cross_entropy_backward(logits, target, g, ignore_index, label_smoothing):
    """d loss / d logits = g * (softmax(x) - (1 - eps) onehot(target) - eps / C), block by block of rows."""
    w = _wide(logits)
    n, classes = w.shape
    out = _out(w.shape, w.dtype)
    valid = target != ignore_index
    safe = np.where(valid, target, 0)
    scale = (_wide(g) * valid).astype(w.dtype)
    for start in range(0, n, _CE_BLOCK_ROWS):
        rows = w[start:start + _CE_BLOCK_ROWS]
        p = out[start:start + len(rows)]
        np.subtract(rows, rows.max(axis=1)[:, None], out=p)
        np.exp(p, out=p)
        p /= p.sum(axis=1)[:, None]
        p[np.arange(len(rows)), safe[start:start + len(rows)]] -= 1.0 - label_smoothing
        if label_smoothing:
            p -= label_smoothing / classes
        p *= scale[start:start + len(rows), None]
    return _finish(out, logits.dtype)


def _rows(x, n_dims):
    """View x as (rows, features) over its last n_dims dimensions."""
    features = int(np.prod(x.shape[x.ndim - n_dims:]))
    return _wide(x).reshape(-1, features)


def _layer_norm(x, weight, bias, eps, n_dims):
    w = _rows(x, n_dims)
    mean = w.mean(axis=1, keepdims=True)
    centered = w - mean
    rstd = 1.0 / np.sqrt((centered * centered).mean(axis=1, keepdims=True) + eps)
    y = centered * rstd
    if weight is not None:
        y = y * _wide(weight).reshape(1, -1)
    if bias is not None:
        y = y + _wide(bias).reshape(1, -1)
    return _finish(y.reshape(x.shape), x.dtype)


def _layer_norm_backward(x, weight, g, eps, n_dims):
    w, gw = _rows(x, n_dims), _rows(g, n_dims)
    mean = w.mean(axis=1, keepdims=True)
    rstd = 1.0 / np.sqrt(((w - mean) ** 2).mean(axis=1, keepdims=True) + eps)
    xhat = (w - mean) * rstd
    dxhat = gw * _wide(weight).reshape(1, -1) if weight is not None else gw
    dx = rstd * (dxhat - dxhat.mean(axis=1, keepdims=True) - xhat * (dxhat * xhat).mean(axis=1, keepdims=True))
    norm_shape = x.shape[x.ndim - n_dims:]
    dweight = _finish((gw * xhat).sum(axis=0).reshape(norm_shape), x.dtype)
    dbias = _finish(gw.sum(axis=0).reshape(norm_shape), x.dtype)
    return _finish(dx.reshape(x.shape), x.dtype), dweight, dbias


def _rms_norm(x, weight, eps, n_dims):
    w = _rows(x, n_dims)
    y = w / np.sqrt((w * w).mean(axis=1, keepdims=True) + eps)
    if weight is not None:
        y = y * _wide(weight).reshape(1, -1)
    return _finish(y.reshape(x.shape), x.dtype)


def _rms_norm_backward(x, weight, g, eps, n_dims):
    w, gw = _rows(x, n_dims), _rows(g, n_dims)
    rstd = 1.0 / np.sqrt((w * w).mean(axis=1, keepdims=True) + eps)
    xhat = w * rstd
    dxhat = gw * _wide(weight).reshape(1, -1) if weight is not None else gw
    dx = rstd * (dxhat - xhat * (dxhat * xhat).mean(axis=1, keepdims=True))
    dweight = _finish((gw * xhat).sum(axis=0).reshape(x.shape[x.ndim - n_dims:]), x.dtype)
    return _finish(dx.reshape(x.shape), x.dtype), dweight


def _embedding(weight, idx):
    return stats.track(np.take(weight, idx, axis=0))


def _embedding_backward(idx, g, num_embeddings):
    dim = g.shape[-1]
    flat_idx = idx.reshape(-1)
    flat_g = _wide(g).reshape(-1, dim)
    # Sort by row, then sum each run of equal rows: much faster than np.add.at for large batches.
    order = np.argsort(flat_idx, kind="stable")
    rows, starts = np.unique(flat_idx[order], return_index=True)
    out = np.zeros((num_embeddings, dim), dtype=flat_g.dtype)
    if len(rows):
        out[rows] = np.add.reduceat(flat_g[order], starts, axis=0)
    return _finish(out, g.dtype)


def _dropout(x, seed, p):
    keep = _generator(seed).random(x.shape) >= p
    w = _wide(x)
    return _finish(np.where(keep, w * (1.0 / (1.0 - p)), 0.0).astype(w.dtype), x.dtype)


def _rope(x, cos, sin, inverse):
    """Rotate pairs (x[..., i], x[..., i + D/2]) by the angles whose cos/sin are given as (T, D/2)."""
    w = _wide(x)
    half = w.shape[-1] // 2
    c, s = _wide(cos), _wide(sin)
    x1, x2 = w[..., :half], w[..., half:]
    out = _out(w.shape, w.dtype)
    first, second = out[..., :half], out[..., half:]
    np.multiply(x1, c, out=first)
    np.multiply(x2, c, out=second)
    if inverse:  # rotation by -angle
        first += x2 * s
        second -= x1 * s
    else:
        first -= x2 * s
        second += x1 * s
    return _finish(out, x.dtype)


def _attention_probs(q, k, mask, scale, causal, window):
    """Softmax attention weights (B, Hkv, G, T, S) for queries grouped over shared KV heads."""
    B, H, T, D = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    qw = _wide(q)
    qg = qw.reshape(B, Hkv, H // Hkv, T, D) * qw.dtype.type(scale)  # scale the smaller operand
    scores = np.matmul(qg, _wide(k)[:, :, None].swapaxes(-1, -2))  # (B, Hkv, G, T, S)
    if mask is not None:
        m = np.broadcast_to(mask, (B, H, T, S)).reshape(B, Hkv, H // Hkv, T, S)
        if m.dtype == np.bool_:
            scores = np.where(m, scores, -np.inf)
        else:
            scores += _wide(m)
    if causal or window:
        scores += _position_mask(T, S, causal, window, scores.dtype)
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    scores /= scores.sum(axis=-1, keepdims=True)
    return scores


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


def _sdpa(q, k, v, mask=None, *, scale, causal, window):
    B, H, T, D = q.shape
    p = _attention_probs(q, k, mask, scale, causal, window)
    out = np.matmul(p, _wide(v)[:, :, None])  # (B, Hkv, G, T, Dv)
    return _finish(out.reshape(B, H, T, v.shape[-1]), q.dtype)


def _sdpa_backward(q, k, v, g, mask=None, *, scale, causal, window):
    B, H, T, D = q.shape
    Hkv = k.shape[1]
    G = H // Hkv
    p = _attention_probs(q, k, mask, scale, causal, window)  # recomputed, as flash attention does
    gg = _wide(g).reshape(B, Hkv, G, T, v.shape[-1])
    dv = np.matmul(p.swapaxes(-1, -2), gg)  # (B, Hkv, G, S, Dv)
    dp = np.matmul(gg, _wide(v)[:, :, None].swapaxes(-1, -2))  # (B, Hkv, G, T, S)
    # ds = p * (dp - rowsum(dp * p)) * scale, in place in dp
    row = np.einsum("...ts,...ts->...t", dp, p)[..., None]
    dp -= row
    dp *= p
    dp *= dp.dtype.type(scale)
    dq = np.matmul(dp, _wide(k)[:, :, None]).reshape(B, H, T, D)
    dk = np.matmul(dp.swapaxes(-1, -2), _wide(q).reshape(B, Hkv, G, T, D))
    # the G query heads that share a KV head add their gradients
    dk = dk[:, :, 0] if G == 1 else dk.sum(axis=2)
    dv = dv[:, :, 0] if G == 1 else dv.sum(axis=2)
    return _finish(dq, q.dtype), _finish(np.ascontiguousarray(dk), k.dtype), _finish(np.ascontiguousarray(dv), v.dtype)


class CPUBackend(Backend):
    device = "cpu"

    def __init__(self):
        self.pool = _pool
        self.kernels = {
            "neg": _unary(np.negative), "exp": _unary(np.exp), "log": _unary(np.log), "sqrt": _unary(np.sqrt),
            "rsqrt": _rsqrt, "abs": _unary(np.abs), "sin": _unary(np.sin), "cos": _unary(np.cos),
            "tanh": _unary(np.tanh), "relu": lambda a: _finish(np.maximum(a, 0), a.dtype),
            "sigmoid": lambda a: _finish(_sigmoid(_wide(a)), a.dtype),
            "gelu": _gelu, "silu": _silu, "sign": _unary(np.sign),
            "logical_not": lambda a: stats.track(np.logical_not(a)), "cast": _cast,
            "gelu_backward": _gelu_backward, "silu_backward": _silu_backward,
            "add": _binary(np.add), "sub": _binary(np.subtract), "mul": _binary(np.multiply),
            "div": _binary(np.true_divide), "pow": _pow, "maximum": _binary(np.maximum),
            "minimum": _binary(np.minimum),
            "eq": _compare(np.equal), "ne": _compare(np.not_equal), "lt": _compare(np.less),
            "le": _compare(np.less_equal), "gt": _compare(np.greater), "ge": _compare(np.greater_equal),
            "where": _where,
            "sum": _sum, "max": _reduce(np.max), "min": _reduce(np.min),
            "argmax": _arg(np.argmax), "argmin": _arg(np.argmin), "cumsum": _cumsum, "topk": _topk,
            "matmul": _matmul,
            "reshape": _reshape, "permute": lambda a, axes: np.transpose(a, axes),
            "expand": lambda a, shape: np.broadcast_to(a, shape), "slice": _slice,
            "flip": lambda a, axes: np.flip(a, axes), "contiguous": _contiguous,
            "index": _index, "index_put_add": _index_put_add, "take_along_dim": _take_along_dim,
            "scatter_add_along_dim": _scatter_add_along_dim, "cat": _cat, "pad": _pad,
            "tril": _tril, "triu": _triu,
            "full": _full, "arange": _arange, "rand": _rand, "randn": _randn, "randint": _randint,
            "copy_from": _copy_from, "assign": _assign,
            "softmax": _softmax, "softmax_backward": _softmax_backward,
            "log_softmax": _log_softmax, "log_softmax_backward": _log_softmax_backward,
            "cross_entropy": _cross_entropy, "cross_entropy_backward": _cross_entropy_backward,
            "layer_norm": _layer_norm, "layer_norm_backward": _layer_norm_backward,
            "rms_norm": _rms_norm, "rms_norm_backward": _rms_norm_backward,
            "embedding": _embedding, "embedding_backward": _embedding_backward, "dropout": _dropout,
            "rope": _rope, "sdpa": _sdpa, "sdpa_backward": _sdpa_backward,
        }
        self.check_contract()

    def from_numpy(self, array):
        return stats.track(np.array(array, copy=True, order="C"))

    def adamw_step(self, *args, **kwargs) -> None:
        _adamw_step(*args, **kwargs)

    def grad_norm(self, grads, max_norm: float = 0.0):
        return _grad_norm(grads, max_norm)

    def write(self, array, values) -> None:
        array[...] = values

    def to_numpy(self, array):
        return array

    def release(self, array) -> None:
        # Recycle only when nothing else holds the array or its base (a view made from it, a tensor):
        # the engine passed its last reference, so the counts are this argument plus getrefcount's own
        # (and, for the base, the array's .base link). Measured on CPython 3.11-3.13.
        if array.base is not None and sys.getrefcount(array) <= 2 and sys.getrefcount(array.base) <= 2:
            self.pool.recycle(array)


def _adamw_step(params, grads, exp_avgs, exp_avg_sqs, lr_step, *, beta1, beta2, eps, weight_decay,
                grad_scale=None) -> None:
    lr, step = float(lr_step[0]), float(lr_step[1])
    scale = float(grad_scale[0]) if grad_scale is not None else 1.0
    step_size = lr / (1.0 - beta1 ** step)
    bc2_sqrt = math.sqrt(1.0 - beta2 ** step)
    for p, g, m, v in zip(params, grads, exp_avgs, exp_avg_sqs):
        w = _wide(p)
        gw = _wide(g) * np.float32(scale) if scale != 1.0 else _wide(g)
        if weight_decay:
            w *= np.float32(1.0 - lr * weight_decay)
        m *= np.float32(beta1)
        m += np.float32(1.0 - beta1) * gw
        v *= np.float32(beta2)
        v += np.float32(1.0 - beta2) * gw * gw
        denom = np.sqrt(v) / np.float32(bc2_sqrt)
        denom += np.float32(eps)
        w -= np.float32(step_size) * (m / denom)
        if w is not p:
            p[...] = w


def _grad_norm(grads, max_norm: float = 0.0):
    total = sum(float(np.dot(g.reshape(-1).astype(np.float32, copy=False),
                             g.reshape(-1).astype(np.float32, copy=False))) for g in grads)
    norm = math.sqrt(total)
    coef = min(1.0, max_norm / (norm + 1e-6)) if max_norm > 0 else 1.0
    return np.array([norm, coef], dtype=np.float32)


def _keep_freed_memory_mapped() -> None:
    """Ask glibc to serve big arrays from its heap and keep freed memory, instead of mmap-ing fresh
    pages for every array over 128 KiB and unmapping them on free: NumPy temporaries then skip the
    page faults, which made elementwise kernels on large arrays 2-3x slower. The cost is that freed
    memory stays with the process (as a caching allocator's does). GRADCRAFT_MALLOC_TUNING=0 opts out."""
    if os.environ.get("GRADCRAFT_MALLOC_TUNING", "1") == "0" or not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6")
        M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
        libc.mallopt(M_MMAP_THRESHOLD, 1 << 30)
        libc.mallopt(M_TRIM_THRESHOLD, 1 << 30)
    except (OSError, AttributeError):  # not glibc: nothing to tune
        pass


def create_backend(index: int = 0) -> CPUBackend:
    _keep_freed_memory_mapped()
    return CPUBackend()
