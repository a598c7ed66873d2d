"""The CPU backend: every kernel of the contract, written with NumPy.

These are also the reference implementations: each CUDA kernel is tested
against the function of the same name here.

float16 and bfloat16 arithmetic runs in float32 and rounds once at the end, as
GPUs do; NumPy's own half-precision loops are slow and round every step.

The elementwise and row-wise kernels can run on several threads when their
arrays are big (`_parallel`; off unless GRADCRAFT_NUM_THREADS says otherwise,
see `num_threads`); matmuls use BLAS's own threads.
"""

import ctypes
import functools
import math
import os
import sys

import numpy as np

from gradcraft.backend import Backend, blas, check_optimizer_state, cpu_native, philox, slices_tile_one_axis
from gradcraft.backend.cpu_threads import (_BLOCK, _CE_BLOCK, _MAP_BLOCK, _into, _map, _parallel,  # noqa: F401
                                           _rowwise, num_threads, set_num_threads)
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


def _gelu_tanh_inner(w, out):
    """sqrt(2/pi) * (w + 0.044715 w^3) into out, as sqrt(2/pi) * w * (1 + 0.044715 w^2): NumPy's
    w ** 3 calls pow() for each element and is ~100x slower than two multiplies."""
    np.multiply(w, w, out=out)
    out *= 0.044715
    out += 1.0
    out *= w
    out *= _SQRT_2_OVER_PI
    return out


def _gelu(x, approximate="none"):
    def block(out, xb):
        def compute(o):
            w = _wide(xb)
            if approximate == "tanh":  # 0.5 w (1 + tanh(inner)), in place
                np.tanh(_gelu_tanh_inner(w, o), out=o)
            else:  # 0.5 w (1 + erf(w / sqrt 2))
                o[...] = _erf(w / math.sqrt(2.0))
            o += 1.0
            o *= w
            o *= 0.5
        _into(out, compute)
    return _rowwise(block, _out(x.shape, x.dtype), x)


def _gelu_backward(x, g, approximate="none"):
    def block(out, xb, gb):
        def compute(o):
            w, gw = _wide(xb), _wide(gb)
            if approximate == "tanh":
                # d = 0.5 (1 + t) + 0.5 w (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 w^2), t = tanh(inner)
                t = np.tanh(_gelu_tanh_inner(w, o), out=o)
                slope = np.multiply(w, w, dtype=o.dtype)
                slope *= 3 * 0.044715
                slope += 1.0
                slope *= w
                slope *= 0.5 * _SQRT_2_OVER_PI
                sech2 = np.multiply(t, t, dtype=o.dtype)
                np.subtract(1.0, sech2, out=sech2)
                sech2 *= slope
                t += 1.0
                t *= 0.5
                t += sech2
            else:  # cdf(w) + w * pdf(w)
                cdf = 0.5 * (1.0 + _erf(w / math.sqrt(2.0)))
                o[...] = cdf + w * np.exp(-0.5 * w * w) / math.sqrt(2.0 * math.pi)
            o *= gw
        _into(out, compute)
    return _rowwise(block, _out(x.shape, x.dtype), x, g)


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


def _silu(x):
    def block(out, xb):
        def compute(o):
            w = _wide(xb)
            _sigmoid(w, out=o)
            o *= w
        _into(out, compute)
    return _rowwise(block, _out(x.shape, x.dtype), x)


def _swiglu(h):
    """silu(gate) * up for h = [gate | up] along the last axis (SwiGLU's two projections, one matmul)."""
    f = h.shape[-1] // 2

    def block(out, hb):
        def compute(o):
            w = _wide(hb)
            gate = w[..., :f]
            _sigmoid(gate, out=o)
            o *= gate
            o *= w[..., f:]
        _into(out, compute)
    return _rowwise(block, _out(h.shape[:-1] + (f,), h.dtype), h, inner=1)


def _swiglu_backward(h, g):
    """The gradient shaped like h: d gate = g * up * silu'(gate), d up = g * silu(gate)."""
    f = h.shape[-1] // 2

    def block(out, hb, gb):
        def compute(o):
            w, gw = _wide(hb), _wide(gb)
            gate, up = w[..., :f], w[..., f:]
            dgate, dup = o[..., :f], o[..., f:]
            s = _sigmoid(gate, out=dup)
            np.subtract(1.0, s, out=dgate)  # silu' = s * (1 + gate * (1 - s))
            dgate *= gate
            dgate += 1.0
            dgate *= s
            dgate *= up
            dgate *= gw
            dup *= gate
            dup *= gw
        _into(out, compute)
    return _rowwise(block, _out(h.shape, h.dtype), h, g, inner=1)


def _silu_backward(x, g):
    # d/dx x*s(x) = s * (1 + x * (1 - s)), computed in place
    def block(out, xb, gb):
        def compute(o):
            w = _wide(xb)
            s = _sigmoid(w, out=o)
            d = np.subtract(1.0, s, dtype=s.dtype)
            d *= w
            d += 1.0
            s *= d
            s *= _wide(gb)
        _into(out, compute)
    return _rowwise(block, _out(x.shape, x.dtype), x, g)


def _binary(fn):
    def kernel(a, b):
        wa, wb = _wide(a), _wide(b)
        shape = np.broadcast_shapes(wa.shape, wb.shape)
        out = _out(shape, np.result_type(wa, wb))
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
        if 2 <= rows.shape[0] <= 32 and wb.flags.f_contiguous and not wb.flags.c_contiguous:
            # x @ W.T with a few rows (a decoding step): OpenBLAS computes W @ x.T 1.3-1.9x faster,
            # and at this size the transposed copy into `out` costs little (measured on 2 cores; from
            # about 128 rows on, the copy costs more than the product gains).
            out[...] = np.matmul(wb.T, rows.T).T
        else:
            np.matmul(rows, wb, out=out)
        out = out.reshape(wa.shape[:-1] + (wb.shape[1],))
        return _finish(out, a.dtype) if wa is not a else out
    if wb.ndim >= 2 and wb.strides[-1] != wb.itemsize and wb.shape[-1] > 1:
        # A transposed right operand (q @ k^T, g @ v^T) sends NumPy's batched matmul to a loop 2x
        # slower than BLAS on a contiguous copy, copy included.
        wb = np.ascontiguousarray(wb)
    if wa.ndim < 2 or wb.ndim < 2:
        return _finish(np.matmul(wa, wb), a.dtype)
    out = _out(np.broadcast_shapes(wa.shape[:-2], wb.shape[:-2]) + (wa.shape[-2], wb.shape[-1]),
               np.result_type(wa, wb))
    np.matmul(wa, wb, out=out)
    return _finish(out, a.dtype) if wa is not a else out


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
    if not indices:
        return _put_slices(g, spec, shape)
    out = _out(shape, _wide(g).dtype)
    out.fill(0)
    np.add.at(out, _index_tuple(indices, spec), _wide(g))  # gathered positions may repeat: accumulate
    return _finish(out, g.dtype)


def _put_slices(g, spec, shape):
    """Zeros of `shape` with g written at the slices of spec (the gradient of slicing): writes the
    box and zero-fills only the rest, instead of zero-filling everything and then the box again."""
    out = _out(shape, g.dtype)
    slices = [slice(*item).indices(n) for item, n in zip(spec, shape)] + [(0, n, 1) for n in shape[len(spec):]]
    if any(step != 1 for _, _, step in slices) or out.ndim == 0:
        out.fill(0)
        out[tuple(slice(*s) for s in slices)] = g
        return out

    def fill(lo, hi):  # rows lo:hi of the first axis, which the box covers whole when split
        view, box = out[lo:hi], [slice(*s) for s in slices]
        if hi - lo != shape[0]:
            box[0] = slice(0, hi - lo)
        for axis, s in enumerate(box):  # the complement of the box: below and above it on each axis
            start, stop = max(s.start, 0), max(s.stop, s.start)
            lead = tuple(box[:axis])
            if start > 0:
                view[lead + (slice(0, start),)] = 0
            if stop < view.shape[axis]:
                view[lead + (slice(stop, None),)] = 0
        view[tuple(box)] = g[lo:hi] if hi - lo != shape[0] else g
    if slices[0] == (0, shape[0], 1):
        _parallel(fill, shape[0], out.size // max(shape[0], 1), _MAP_BLOCK)
    else:
        fill(0, shape[0])
    return out


def _put_slices_many(*gs, specs, shape):
    """Zeros of `shape` with each g added at its slices: the gradients of several slices of one
    tensor (q/k/v out of one matmul) in one buffer, instead of one zero-filled buffer each, added."""
    if len(gs) == 1:
        return _put_slices(gs[0], specs[0], shape)
    dtype = np.result_type(*[_wide(g) for g in gs])
    out = _out(shape, dtype)
    if slices_tile_one_axis(specs, shape):
        for g, spec in zip(gs, specs):
            out[tuple(slice(*s) for s in spec)] = g
    else:
        out.fill(0)
        for g, spec in zip(gs, specs):
            out[tuple(slice(*s) for s in spec)] += _wide(g)
    return _finish(out, gs[0].dtype)


def _moe_permute(x, slot, rows):
    """(rows, C) buffer whose row slot[n, j] holds token x[n] (zeros elsewhere). Slots are distinct
    but for the last row, where dropped assignments all land (and which the caller discards)."""
    out = _out((rows, x.shape[1]), x.dtype)
    out.fill(0)
    out[slot.reshape(-1)] = np.repeat(x, slot.shape[1], axis=0)
    return out


def _moe_permute_backward(g, slot):
    """d x[n] = sum_j g[slot[n, j]]: a gather per token, no scatter."""
    return _finish(_wide(g)[slot].sum(axis=1), g.dtype)


def _moe_unpermute(y, slot, w):
    """out[n] = sum_j w[n, j] * y[slot[n, j]] (y's last row is zeros for dropped assignments)."""
    wy = _wide(y)
    return _finish(np.einsum("njc,nj->nc", wy[slot], _wide(w).astype(wy.dtype)), y.dtype)


def _moe_unpermute_backward(y, slot, w, g):
    wy, wg = _wide(y), _wide(g)
    dy = np.zeros(wy.shape, dtype=wy.dtype)
    dy[slot.reshape(-1)] = (_wide(w).astype(wy.dtype)[:, :, None] * wg[:, None, :]).reshape(-1, wy.shape[1])
    dw = np.einsum("njc,nc->nj", wy[slot], wg)
    return _finish(dy, y.dtype), _finish(dw, w.dtype)


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

def _last_axis_rows(*arrays):
    """Views (rows, last axis) of C-contiguous arrays, so that blocks hold whole rows of any rank;
    other layouts stay as they are (the blocks then follow their first axis)."""
    if all(a.ndim >= 2 and a.flags.c_contiguous for a in arrays):
        return [a.reshape(-1, a.shape[-1]) for a in arrays]
    return list(arrays)


def _softmax(x, axis):
    if axis != x.ndim - 1:  # rows along another axis: one pass per step, on one thread
        w = _wide(x)
        out = np.subtract(w, w.max(axis=axis, keepdims=True), dtype=w.dtype)
        np.exp(out, out=out)
        out /= out.sum(axis=axis, keepdims=True)
        return _finish(out, x.dtype)

    def block(out, xb):
        def compute(o):
            w = _wide(xb)
            np.subtract(w, w.max(axis=-1, keepdims=True), out=o)
            np.exp(o, out=o)
            o /= o.sum(axis=-1, keepdims=True)
        _into(out, compute)
    out = _out(x.shape, x.dtype)
    _rowwise(block, *_last_axis_rows(out, x), inner=1)
    return out


def _softmax_backward(y, g, axis):
    if axis != y.ndim - 1:
        wy, wg = _wide(y), _wide(g)
        return _finish(wy * (wg - (wg * wy).sum(axis=axis, keepdims=True)), y.dtype)

    def block(out, yb, gb):
        def compute(o):
            wy, wg = _wide(yb), _wide(gb)
            np.multiply(wg, wy, out=o)
            row = o.sum(axis=-1, keepdims=True)
            np.subtract(wg, row, out=o)
            o *= wy
        _into(out, compute)
    out = _out(y.shape, y.dtype)
    _rowwise(block, *_last_axis_rows(out, y, g), inner=1)
    return out


def _log_softmax(x, axis):
    if axis != x.ndim - 1:
        w = _wide(x)
        out = np.subtract(w, w.max(axis=axis, keepdims=True), dtype=w.dtype)
        out -= np.log(np.exp(out).sum(axis=axis, keepdims=True))
        return _finish(out, x.dtype)

    def block(out, xb):
        def compute(o):
            w = _wide(xb)
            np.subtract(w, w.max(axis=-1, keepdims=True), out=o)
            o -= np.log(np.exp(o).sum(axis=-1, keepdims=True))
        _into(out, compute)
    out = _out(x.shape, x.dtype)
    _rowwise(block, *_last_axis_rows(out, x), inner=1)
    return out


def _log_softmax_backward(y, g, axis):
    if axis != y.ndim - 1:
        wy, wg = _wide(y), _wide(g)
        return _finish(wg - np.exp(wy) * wg.sum(axis=axis, keepdims=True), y.dtype)

    def block(out, yb, gb):
        def compute(o):
            wy, wg = _wide(yb), _wide(gb)
            np.exp(wy, out=o)
            o *= -wg.sum(axis=-1, keepdims=True)  # wg - exp(y) * sum(wg), sign moved: exact
            o += wg
        _into(out, compute)
    out = _out(y.shape, y.dtype)
    _rowwise(block, *_last_axis_rows(out, y, g), inner=1)
    return out


def _cross_entropy(logits, target, ignore_index, label_smoothing, valid_classes=None, float_loss=False):
    """Per-row loss of (N, C) logits against (N,) class ids; ignored rows give 0 (float32 with
    float_loss, else the logits' dtype).

    loss = logsumexp(x) - x[target]; with smoothing eps: (1 - eps) * that + eps * (logsumexp(x) - mean(x)).
    Only the first valid_classes columns (None: all) are classes; the rest (padding) are not read.
    Computed block by block of rows, so the exp temporaries stay in cache, on several threads.
    """
    n, width = logits.shape
    classes = width if valid_classes is None else valid_classes
    wdtype = np.float32 if logits.dtype in _HALF else logits.dtype
    loss = np.empty(n, dtype=wdtype)
    valid = target != ignore_index
    safe = np.where(valid, target, 0)

    def block(a, b):
        rows = _wide(logits[a:b, :classes])
        tmp = np.subtract(rows, rows.max(axis=1)[:, None], dtype=wdtype)
        picked = tmp[np.arange(b - a), safe[a:b]]
        mean_shifted = tmp.mean(axis=1) if label_smoothing else None
        np.exp(tmp, out=tmp)
        lse = np.log(tmp.sum(axis=1))
        nll = lse - picked
        if label_smoothing:
            nll = (1.0 - label_smoothing) * nll + label_smoothing * (lse - mean_shifted)
        loss[a:b] = nll
    _parallel(block, n, classes, _CE_BLOCK)
    loss[~valid] = 0.0
    return _finish(loss, np.dtype(np.float32) if float_loss and logits.dtype in _HALF else logits.dtype)


def _linear_cross_entropy(x, w, target, *, ignore_index=-100, label_smoothing=0.0, valid_classes=None,
                          chunk_bytes=256 << 20):
    """Reference of the fused output layer + loss (cuda/nn.py linear_cross_entropy): the sum over rows
    of cross_entropy(x @ w^T, target) and its gradients dx and dw, chunk by chunk of rows, so the
    (N, V) logits are never held whole. Logits and dlogits are rounded to x's dtype as the unfused
    path's would be; dw is summed over the chunks in the accumulator type."""
    n, c = x.shape
    v = w.shape[0]
    wide = np.float64 if x.dtype == np.float64 else np.float32
    wx, ww = _wide(x).astype(wide, copy=False), _wide(w).astype(wide, copy=False)
    rows = max(1, min(n, chunk_bytes // max(v * x.dtype.itemsize, 1)))  # (the CUDA kernel's chunks differ: same sums)
    total = np.zeros((), wide)
    dx = np.empty((n, c), wide)
    dw = np.zeros((v, c), wide)
    ones = np.ones(rows, wide)
    for start in range(0, n, rows):
        end = min(n, start + rows)
        logits = _finish(wx[start:end] @ ww.T, x.dtype)
        losses = _cross_entropy(logits, target[start:end], ignore_index, label_smoothing, valid_classes, True)
        total += _wide(losses).astype(wide).sum()
        dlogits = _wide(_cross_entropy_backward(logits, target[start:end], ones[:end - start], ignore_index,
                                                label_smoothing, valid_classes, True)).astype(wide, copy=False)
        dx[start:end] = dlogits @ ww
        dw += dlogits.T @ wx[start:end]
    return total, _finish(dx, x.dtype), _finish(dw, w.dtype)


def _cross_entropy_backward(logits, target, g, ignore_index, label_smoothing, valid_classes=None, float_loss=False):
    """d loss / d logits = g * (softmax(x) - (1 - eps) onehot(target) - eps / C), block by block of
    rows on several threads; g / sum(exp) scales each row in the same pass as the normalization.
    Columns past valid_classes (padding) get 0."""
    n, width = logits.shape
    classes = width if valid_classes is None else valid_classes
    out = _out(logits.shape, logits.dtype)
    valid = target != ignore_index
    safe = np.where(valid, target, 0)
    wdtype = np.float32 if logits.dtype in _HALF else logits.dtype
    scale = (_wide(g) * valid).astype(wdtype)

    def block(a, b):
        def compute(p):
            rows = _wide(logits[a:b, :classes])
            np.subtract(rows, rows.max(axis=1)[:, None], out=p)
            np.exp(p, out=p)
            p *= (scale[a:b] / p.sum(axis=1))[:, None]
            p[np.arange(b - a), safe[a:b]] -= (1.0 - label_smoothing) * scale[a:b]
            if label_smoothing:
                p -= (label_smoothing / classes) * scale[a:b, None]
        _into(out[a:b, :classes], compute)
        out[a:b, classes:] = 0
    _parallel(block, n, width, _CE_BLOCK)
    return out


def _rows(x, n_dims):
    """View x as (rows, features) over its last n_dims dimensions."""
    features = math.prod(x.shape[x.ndim - n_dims:])
    return x.reshape(-1, features)


def _norm_rows(x, weight, g, n_dims):
    """(rows, features) views of x (and g), the weight as a float row, and the float dtype."""
    rows = _rows(x, n_dims)
    grows = _rows(g, n_dims) if g is not None else None
    w = _wide(weight).reshape(1, -1) if weight is not None else None
    return rows, grows, w, (np.float32 if x.dtype in _HALF else x.dtype)


def _sum_blocks(partials: dict, features: int, dtype):
    """Sum per-block partial results (keyed by first row) in row order: the same result for any
    thread count, since the blocks do not depend on it. Zeros when there were no rows."""
    total = np.zeros(features, dtype)
    for key in sorted(partials):
        total += partials[key]
    return total


def _layer_norm(x, weight, bias, eps, n_dims):
    rows, _, wt, _ = _norm_rows(x, weight, None, n_dims)
    b = _wide(bias).reshape(1, -1) if bias is not None else None
    out = _out(rows.shape, x.dtype)

    def block(ob, xb):
        def compute(o):
            w = _wide(xb)
            np.subtract(w, w.mean(axis=1, keepdims=True), out=o)
            o *= 1.0 / np.sqrt((o * o).mean(axis=1, keepdims=True) + eps)
            if wt is not None:
                o *= wt
            if b is not None:
                o += b
        _into(ob, compute)
    _rowwise(block, out, rows, inner=1)
    return out.reshape(x.shape)


def _layer_norm_backward(x, weight, g, eps, n_dims):
    rows, grows, wt, fdt = _norm_rows(x, weight, g, n_dims)
    features = rows.shape[1]
    dx = _out(rows.shape, x.dtype)
    partials = {}

    def block(a, b):
        w, gw = _wide(rows[a:b]), _wide(grows[a:b])
        xhat = w - w.mean(axis=1, keepdims=True)
        rstd = 1.0 / np.sqrt((xhat * xhat).mean(axis=1, keepdims=True) + eps)
        xhat *= rstd
        partials[a] = ((gw * xhat).sum(axis=0), gw.sum(axis=0))
        dxhat = gw * wt if wt is not None else gw.copy()
        # dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))
        proj = (dxhat * xhat).mean(axis=1, keepdims=True)
        dxhat -= dxhat.mean(axis=1, keepdims=True)
        xhat *= proj
        dxhat -= xhat
        dxhat *= rstd
        dx[a:b] = dxhat
    _parallel(block, rows.shape[0], features)
    norm_shape = x.shape[x.ndim - n_dims:]
    dweight = _sum_blocks({k: v[0] for k, v in partials.items()}, features, fdt)
    dbias = _sum_blocks({k: v[1] for k, v in partials.items()}, features, fdt)
    return (dx.reshape(x.shape), _finish(dweight.reshape(norm_shape), x.dtype),
            _finish(dbias.reshape(norm_shape), x.dtype))


def _rms_norm(x, weight, eps, n_dims):
    rows, _, wt, _ = _norm_rows(x, weight, None, n_dims)
    out = _out(rows.shape, x.dtype)

    def block(ob, xb):
        def compute(o):
            w = _wide(xb)
            np.multiply(w, w, out=o)
            rstd = 1.0 / np.sqrt(o.mean(axis=1, keepdims=True) + eps)
            np.multiply(w, rstd, out=o)
            if wt is not None:
                o *= wt
        _into(ob, compute)
    _rowwise(block, out, rows, inner=1)
    return out.reshape(x.shape)


def _rms_norm_backward(x, weight, g, eps, n_dims):
    rows, grows, wt, fdt = _norm_rows(x, weight, g, n_dims)
    features = rows.shape[1]
    dx = _out(rows.shape, x.dtype)
    partials = {}

    def block(a, b):
        w, gw = _wide(rows[a:b]), _wide(grows[a:b])
        rstd = 1.0 / np.sqrt(np.einsum("ij,ij->i", w, w)[:, None] / features + eps)
        xhat = w * rstd
        dxhat = gw * wt if wt is not None else gw.copy()
        # dx = rstd * (dxhat - xhat * mean(dxhat * xhat)); xhat's buffer ends as the product
        proj = np.einsum("ij,ij->i", dxhat, xhat)[:, None] / features
        xhat *= gw
        partials[a] = xhat.sum(axis=0)
        np.multiply(w, rstd * proj, out=xhat)
        dxhat -= xhat
        dxhat *= rstd
        dx[a:b] = dxhat
    _parallel(block, rows.shape[0], features)
    dweight = _sum_blocks(partials, features, fdt).reshape(x.shape[x.ndim - n_dims:])
    return dx.reshape(x.shape), _finish(dweight, x.dtype)


def _embedding(weight, idx):
    return stats.track(np.take(weight, idx, axis=0))


def _embedding_backward(idx, g, num_embeddings):
    dim = g.shape[-1]
    flat_idx = idx.reshape(-1)
    flat_g = _wide(g).reshape(-1, dim)
    out = _out((num_embeddings, dim), flat_g.dtype)
    out.fill(0)
    if not len(flat_idx):
        return _finish(out, g.dtype)
    # Sort by row, then sum each run of equal rows level by level: every row's first occurrence, then
    # the second ones of the rows that have two, ... (a sequential sum in the original order).
    # np.add.reduceat over axis 0 took ~15x longer; np.add.at ~8x.
    order = np.argsort(flat_idx, kind="stable")
    rows, starts, counts = np.unique(flat_idx[order], return_index=True, return_counts=True)
    rank = np.arange(len(order)) - np.repeat(starts, counts)  # occurrence number within its row
    slot = np.repeat(np.arange(len(rows)), counts)  # the row's place in `rows`
    sums = flat_g[order[rank == 0]]
    for level in range(1, int(counts.max())):
        sel = rank == level
        sums[slot[sel]] += flat_g[order[sel]]  # a row appears at most once per level
    out[rows] = sums
    return _finish(out, g.dtype)


def _dropout(x, state=None, *, p, stream=0, seed=None):
    """Zero where the element's uniform number is < p, scale the rest by 1/(1-p).

    state: int64 [seed, counter] (the device's random state, gradcraft/ops/creation.py), read when the
    kernel runs; stream: the layer's place in its step. Element i's number is the i-th of NumPy's
    Philox stream with counter [0, counter, stream, 0] and key [seed, 0], as dropout.cu computes it,
    so the mask is a function of (seed, counter, stream, i) and CPU and CUDA masks are bit-identical.
    `seed=` without a state means state [seed, 0] (kernel tests)."""
    seed, counter = (int(v) & 0xFFFFFFFFFFFFFFFF for v in (state if state is not None else (seed, 0)))
    bits = np.random.Philox(counter=[0, counter, stream, 0], key=[seed, 0])
    keep = np.random.Generator(bits).random(x.shape) >= p
    w = _wide(x)
    return _finish(np.where(keep, w * (1.0 / (1.0 - p)), 0.0).astype(w.dtype), x.dtype)


def _attention_dropout(x, state, *, p, stream, T, S, i0=0, j0=0):
    """Attention weights x (..., t, s) of queries i0.. and keys j0.. of a (B, H, T, S) attention, dropped
    with the flash kernels' mask (backend/philox.py) and scaled; the explicit path's dropout."""
    return _finish(philox.attention_dropout(_wide(x), state, p=p, stream=stream, T=T, S=S, i0=i0, j0=j0),
                   x.dtype)


def _rope(x, cos, sin, inverse):
    """Rotate pairs (x[..., i], x[..., i + D/2]) by the angles whose cos/sin are given as (T, D/2).

    As x * [cos, cos] + swap_halves(x) * [-sin, sin] on a contiguous copy of each block: the halves
    of a head are short runs (16 floats for D = 32), and NumPy's loops over such short runs are 2x
    slower than over whole rows."""
    half = x.shape[-1] // 2
    wdtype = np.float32 if x.dtype in _HALF else x.dtype
    c, s = _wide(cos).astype(wdtype, copy=False), _wide(sin).astype(wdtype, copy=False)
    cos2 = np.concatenate([c, c], axis=-1)  # (T, D)
    sin2 = np.concatenate([s, -s] if inverse else [-s, s], axis=-1)  # (rotation by -angle: inverse)

    def block(out, xb):
        def compute(o):
            w = np.ascontiguousarray(_wide(xb))
            swapped = np.empty_like(w)
            swapped[..., :half] = w[..., half:]
            swapped[..., half:] = w[..., :half]
            swapped *= sin2
            np.multiply(w, cos2, out=o)
            o += swapped
        _into(out, compute)
    # the blocks keep (T, D) whole: cos and sin broadcast over the leading axes only
    return _rowwise(block, _out(x.shape, x.dtype), x, inner=2)


def _attention_weights(q, k, mask, scale, causal, window):
    """Unnormalized softmax attention weights, transposed, and their sums over the keys:
    e^T (B, Hkv, S, G*T) and l (B, Hkv, G*T, 1), with p = e / l, for queries grouped over shared
    KV heads. Callers divide the (G*T, D) products by l instead of e itself: a pass over a
    D/S-times smaller array.

    Each KV head's G query heads are stacked into one (G*T, D) matrix: one matmul per KV head, and
    products against p sum over the group by themselves. The weights are kept as (S, queries) because
    NumPy's max and sum over a short last axis are 2-3x slower than over the axis before it (which
    are elementwise across rows). The masks and the exponentials run block by block of KV heads."""
    B, H, T, D = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    G = H // Hkv
    qw, kw = _wide(q), _wide(k)
    dtype = qw.dtype
    qt = np.empty((B, Hkv, D, G, T), dtype)  # (q * scale)^T: the scale on the smaller operand
    np.multiply(qw.reshape(B, Hkv, G, T, D).transpose(0, 1, 4, 2, 3), dtype.type(scale), out=qt)
    scores = np.matmul(kw, qt.reshape(B, Hkv, D, G * T))  # (B, Hkv, S, G*T)
    bias = _attention_bias(mask, B, H, Hkv, T, S, causal, window, dtype)  # None, (S, 1, T) or (B*Hkv, S, G, T)
    heads = scores.reshape(B * Hkv, S, G, T)
    sums = np.empty((B * Hkv, 1, G, T), dtype)

    def block(lo, hi):
        sb = heads[lo:hi]
        if bias is not None:
            sb += bias if bias.ndim == 3 else bias[lo:hi]
        sb -= sb.max(axis=1, keepdims=True)
        np.exp(sb, out=sb)
        np.sum(sb, axis=1, keepdims=True, out=sums[lo:hi])
    _parallel(block, B * Hkv, S * G * T)
    return scores, sums.reshape(B, Hkv, G * T, 1)


def _attention_bias(mask, B, H, Hkv, T, S, causal, window, dtype):
    """The additive mask of the transposed scores: (S, 1, T) when it is the same for every head,
    else (B*Hkv, S, G, T); None when nothing is masked. A bool mask gives -inf where it is False."""
    bias = None
    if mask is not None:
        bias = np.where(mask, 0.0, -np.inf).astype(dtype) if mask.dtype == np.bool_ else _wide(mask).astype(dtype)
    if causal or window:
        position = _position_mask(T, S, causal, window, dtype)
        bias = position if bias is None else bias + position
    if bias is None:
        return None
    if bias.ndim <= 2:
        return np.broadcast_to(bias, (T, S)).T.reshape(S, 1, T)
    per_head = np.broadcast_to(bias, (B, H, T, S)).reshape(B, Hkv, H // Hkv, T, S)
    return np.ascontiguousarray(per_head.transpose(0, 1, 4, 2, 3)).reshape(B * Hkv, S, H // Hkv, T)


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
    position = _position_mask(T, S, causal, window, np.float32 if scores.dtype in _HALF else scores.dtype) \
        if causal or window else None

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
    out = _out(p.shape, p.dtype)

    def block(ob, pb, gb):
        def compute(o):
            wp, wg = _wide(pb), _wide(gb)
            np.subtract(wg, np.einsum("...s,...s->...", wg, wp)[..., None], out=o)
            o *= wp
            o *= o.dtype.type(scale)
        _into(ob, compute)
    _rowwise(block, *_last_axis_rows(out, p, g), inner=1)
    return out


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
    Hkv, Dv = k.shape[1], v.shape[-1]
    et, sums = _attention_weights(q, k, mask, scale, causal, window)  # (B, Hkv, S, G*T), (B, Hkv, G*T, 1)
    vw = _wide(v)
    out = _out((B, Hkv, (H // Hkv) * T, Dv), vw.dtype)
    np.matmul(et.swapaxes(-1, -2), vw, out=out)
    out /= sums
    return _finish(out.reshape(B, H, T, Dv), q.dtype)


def _flash_scores(q, k, scale, causal, window):
    """Scaled, masked scores (B, Hkv, G, T, S) in the accumulator type, query heads grouped by KV head."""
    B, H, T, D = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    s = np.matmul(_wide(q).reshape(B, Hkv, H // Hkv, T, D), _wide(k)[:, :, None].swapaxes(-1, -2))
    s *= s.dtype.type(scale)
    if causal or window:
        s += _position_mask(T, S, causal, window, s.dtype)
    return s


def _flash_attention(q, k, v, state=None, *, scale, causal, window, dropout_p=0.0, stream=0):
    """Reference of the CUDA flash-attention kernel: (output, log-sum-exp of each query's scaled scores).
    A query that sees no key gets zeros and a log-sum-exp of -inf (the kernel's rule). With dropout_p,
    the normalised weights are dropped with backend/philox.py's mask (the log-sum-exp is not)."""
    B, H, T, D = q.shape
    s = _flash_scores(q, k, scale, causal, window)
    top = s.max(axis=-1, keepdims=True) if s.shape[-1] else np.full(s.shape[:-1] + (1,), -np.inf, s.dtype)
    top = np.where(np.isfinite(top), top, 0)
    e = np.exp(s - top)
    sums = e.sum(axis=-1, keepdims=True)
    if dropout_p:
        e = philox.attention_dropout(e, state, p=dropout_p, stream=stream, T=T, S=k.shape[2])
    out = np.matmul(e, _wide(v)[:, :, None]) / np.where(sums > 0, sums, 1)
    with np.errstate(divide="ignore"):
        lse = np.where(sums > 0, np.log(sums) + top, -np.inf)
    return _finish(out.reshape(B, H, T, v.shape[-1]), q.dtype), lse.reshape(B, H, T).astype(s.dtype)


def _flash_attention_backward(q, k, v, out, lse, g, state=None, *, scale, causal, window, dropout_p=0.0,
                              stream=0):
    """Reference of the CUDA kernels: p = exp(scores - lse) recomputed, dvec = rowsum(g * out),
    ds = p (g v^T - dvec) scale; dq = ds k, dk = ds^T q and dv = p^T g summed over each KV head's group.
    With dropout (mask m, scaled): dv = (p m)^T g and ds = p ((g v^T) m - dvec) scale; dvec is still
    rowsum(g * out), as out already holds the dropped weights."""
    B, H, T, D = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    G = H // Hkv
    s = _flash_scores(q, k, scale, causal, window)
    lse = lse.reshape(B, Hkv, G, T, 1).astype(s.dtype)
    with np.errstate(invalid="ignore"):
        p = np.where(np.isfinite(lse), np.exp(s - np.where(np.isfinite(lse), lse, 0)), 0)
    gw = _wide(g).reshape(B, Hkv, G, T, -1)
    dvec = (gw * _wide(out).reshape(gw.shape)).sum(axis=-1, keepdims=True)
    dp = np.matmul(gw, _wide(v)[:, :, None].swapaxes(-1, -2))
    pd = p
    if dropout_p:
        dp = philox.attention_dropout(dp, state, p=dropout_p, stream=stream, T=T, S=S)
        pd = philox.attention_dropout(p, state, p=dropout_p, stream=stream, T=T, S=S)
    ds = p * (dp - dvec) * s.dtype.type(scale)
    dq = np.matmul(ds, _wide(k)[:, :, None]).reshape(q.shape)
    dk = np.matmul(ds.swapaxes(-1, -2), _wide(q).reshape(B, Hkv, G, T, D)).sum(axis=2)
    dv = np.matmul(pd.swapaxes(-1, -2), gw).sum(axis=2)
    return _finish(dq, q.dtype), _finish(dk, k.dtype), _finish(dv, v.dtype)


def _sdpa_backward(q, k, v, g, mask=None, *, scale, causal, window):
    """With p = e / l and g' = g / l (each query's row), the gradients need e only:
    dv = p^T g = e^T g'; dp' = g' v^T = dp / l; ds = p (dp - rowsum(dp p)) = e (dp' - rowsum(dp' e) / l)."""
    B, H, T, D = q.shape
    Hkv, S, Dv = k.shape[1], k.shape[2], v.shape[-1]
    GT = (H // Hkv) * T
    et, sums = _attention_weights(q, k, mask, scale, causal, window)  # recomputed, as flash attention does
    dtype = et.dtype
    gs = np.divide(_wide(g).reshape(B, Hkv, GT, Dv), sums, dtype=dtype)  # g'
    dv = _out((B, Hkv, S, Dv), dtype)
    np.matmul(et, gs, out=dv)  # sums over the group's query heads too
    gt = np.empty((B, Hkv, Dv, GT), dtype)
    gt[...] = gs.swapaxes(-1, -2)  # NumPy's batched matmul is 2-3x slower on a transposed right operand
    dpt = np.matmul(_wide(v), gt)  # dp'^T: (B, Hkv, S, G*T)
    # ds^T in place in dp'^T, block by block on several threads; the softmax's scale goes into the
    # operands of the last two matmuls instead
    dp_heads, e_heads = dpt.reshape(B * Hkv, S, GT), et.reshape(B * Hkv, S, GT)
    inv_sums = 1.0 / sums.reshape(B * Hkv, 1, GT)

    def block(lo, hi):
        d, e = dp_heads[lo:hi], e_heads[lo:hi]
        tmp = d * e
        row = tmp.sum(axis=1, keepdims=True)
        row *= inv_sums[lo:hi]
        d -= row
        d *= e
    _parallel(block, B * Hkv, S * GT)
    ks = np.multiply(_wide(k), dtype.type(scale))
    dq = _out((B, Hkv, GT, D), dtype)
    np.matmul(dpt.swapaxes(-1, -2), ks, out=dq)
    qs = np.multiply(_wide(q), dtype.type(scale)).reshape(B, Hkv, GT, D)
    dk = _out((B, Hkv, S, D), dtype)
    np.matmul(dpt, qs, out=dk)
    return (_finish(dq.reshape(B, H, T, D), q.dtype), _finish(dk, k.dtype), _finish(dv, v.dtype))


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
            "swiglu": _swiglu, "swiglu_backward": _swiglu_backward,
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
            "scatter_add_along_dim": _scatter_add_along_dim, "put_slices": _put_slices_many,
            "moe_permute": _moe_permute, "moe_permute_backward": _moe_permute_backward,
            "moe_unpermute": _moe_unpermute, "moe_unpermute_backward": _moe_unpermute_backward, "cat": _cat, "pad": _pad,
            "tril": _tril, "triu": _triu,
            "full": _full, "arange": _arange, "rand": _rand, "randn": _randn, "randint": _randint,
            "copy_from": _copy_from, "assign": _assign,
            "softmax": _softmax, "softmax_backward": _softmax_backward,
            "log_softmax": _log_softmax, "log_softmax_backward": _log_softmax_backward,
            "cross_entropy": _cross_entropy, "cross_entropy_backward": _cross_entropy_backward,
            "linear_cross_entropy": _linear_cross_entropy,
            "layer_norm": _layer_norm, "layer_norm_backward": _layer_norm_backward,
            "rms_norm": _rms_norm, "rms_norm_backward": _rms_norm_backward,
            "embedding": _embedding, "embedding_backward": _embedding_backward, "dropout": _dropout,
            "attention_dropout": _attention_dropout,
            "rope": _rope, "sdpa": _sdpa, "sdpa_backward": _sdpa_backward,
            "flash_attention": _flash_attention, "flash_attention_backward": _flash_attention_backward,
            "masked_softmax": _masked_softmax, "masked_softmax_backward": _masked_softmax_backward,
        }
        self.check_contract()
        # The compiled C kernels where this machine has a C compiler (cpu_native); the NumPy kernels
        # stay their fallback, and the reference that the C and CUDA kernels are tested against.
        self.reference_kernels = dict(self.kernels)
        self.kernels.update(cpu_native.kernels(self.reference_kernels, _out))
        self.kernels.update(blas.thread_policy(self.kernels))  # small products on one BLAS thread

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
    check_optimizer_state(params, grads, exp_avgs, exp_avg_sqs)  # before any write: UserError
    lr, step = float(lr_step[0]), float(lr_step[1])
    consts = dict(scale=float(grad_scale[0]) if grad_scale is not None else 1.0,
                  step_size=lr / (1.0 - beta1 ** step), bc2_sqrt=math.sqrt(1.0 - beta2 ** step),
                  decay=1.0 - lr * weight_decay if weight_decay else 1.0, beta1=beta1, beta2=beta2, eps=eps)
    # Every parameter cut into flat chunks: the chunks of all parameters are shared among the threads,
    # and each chunk's temporaries stay in cache.
    chunks = []
    for p, g, m, v in zip(params, grads, exp_avgs, exp_avg_sqs):
        if cpu_native.adamw_update(p, g, m, v, **consts):
            continue
        if not (p.flags.c_contiguous and m.flags.c_contiguous and v.flags.c_contiguous):
            _adamw_update(p, g, m, v, **consts)  # (flat views need contiguous buffers)
            continue
        fp, fg, fm, fv = p.reshape(-1), g.reshape(-1), m.reshape(-1), v.reshape(-1)
        chunks += [(fp[a:a + _BLOCK], fg[a:a + _BLOCK], fm[a:a + _BLOCK], fv[a:a + _BLOCK])
                   for a in range(0, fp.size, _BLOCK)]

    _parallel(lambda a, b: [_adamw_update(*chunk, **consts) for chunk in chunks[a:b]], len(chunks), _BLOCK)


def _adamw_update(p, g, m, v, *, scale, step_size, bc2_sqrt, decay, beta1, beta2, eps) -> None:
    """PyTorch's AdamW on one chunk, in place (m and v are float32; p may be half)."""
    w = _wide(p)
    gw = _wide(g)
    if scale != 1.0:
        gw = gw * np.float32(scale)
    if decay != 1.0:
        w *= np.float32(decay)
    t = np.multiply(gw, np.float32(1.0 - beta1), dtype=m.dtype)
    m *= np.float32(beta1)
    m += t
    np.multiply(gw, np.float32(1.0 - beta2), out=t)
    t *= gw
    v *= np.float32(beta2)
    v += t
    np.sqrt(v, out=t)  # the denominator sqrt(v) / sqrt(1 - beta2^step) + eps
    t /= np.float32(bc2_sqrt)
    t += np.float32(eps)
    np.divide(m, t, out=t)
    t *= np.float32(step_size)
    w -= t
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
