"""Launchers for the handwritten NN kernels (kernels/*.cu): one function per contract kernel, with
cpu.py's argument names and attributes. Inputs are made contiguous first; outputs come from
launch.empty (poisoned in tests)."""

import cupy as cp
import numpy as np

from gradcraft.backend.cuda import launch as L
from gradcraft.backend.cuda.launch import f64, i32, i64, ptr


def _c(a: cp.ndarray, dtype=None) -> cp.ndarray:
    """Contiguous, and of `dtype` when given (a gradient always arrives in its tensor's dtype from the
    engine; the cast only guards direct callers)."""
    if dtype is not None and a.dtype != dtype:
        a = a.astype(dtype)
    return L.contiguous(a)


def _acc(a, like) -> cp.ndarray | None:
    """A small parameter (norm weight, rope table) in the kernels' accumulator type for `like`'s dtype."""
    return None if a is None else L.contiguous(a.astype(L.acc_dtype(like.dtype), copy=False)).reshape(-1)


def _last_axis(fn, x, axis, *rest):
    """Run a row kernel over `axis` by moving it last (and back)."""
    if axis in (-1, x.ndim - 1):
        return fn(x, *rest)
    moved = [cp.moveaxis(a, axis, -1) for a in (x, *rest)]
    return cp.ascontiguousarray(cp.moveaxis(fn(*moved), -1, axis))  # (ndim >= 1 here)


# ---------------------------------------------------------------- softmax family

def softmax_rows(x, scale=1.0, mask=None, causal=False, window=None, T=1, S=1, log=False):
    """Row softmax of x (..., C) * scale (+ float32 additive mask of x's shape), attention masking fused."""
    x = _c(x)
    C = x.shape[-1]
    rows = x.size // max(C, 1)
    y = L.empty(x.shape, x.dtype)
    if rows and C:
        L.run("softmax.cu", f"softmax_fwd_{L.suffix(x.dtype)}", rows, L.row_threads(C),
              (x, y, i32(C), f64(scale), ptr(None) if mask is None else _c(mask), i32(bool(causal)),
               i32(window or 0), i32(T), i32(S), i32(bool(log))))
    return y


def softmax_rows_backward(y, g, scale=1.0, log=False):
    y, g = _c(y), _c(g, y.dtype)
    C = y.shape[-1]
    rows = y.size // max(C, 1)
    dx = L.empty(y.shape, y.dtype)
    if rows and C:
        if log:
            L.run("softmax.cu", f"log_softmax_bwd_{L.suffix(y.dtype)}", rows, L.row_threads(C), (y, g, dx, i32(C)))
        else:
            L.run("softmax.cu", f"softmax_bwd_{L.suffix(y.dtype)}", rows, L.row_threads(C),
                  (y, g, dx, i32(C), f64(scale)))
    return dx


def softmax(x, axis):
    return _last_axis(softmax_rows, x, axis)


def log_softmax(x, axis):
    return _last_axis(lambda a: softmax_rows(a, log=True), x, axis)


def softmax_backward(y, g, axis):
    return _last_axis(softmax_rows_backward, y, axis, g)


def log_softmax_backward(y, g, axis):
    return _last_axis(lambda a, b: softmax_rows_backward(a, b, log=True), y, axis, g)


# ---------------------------------------------------------------- cross-entropy

def cross_entropy_with_grad(logits, target, g=None, ignore_index=-100, label_smoothing=0.0, grad_scale=1.0,
                            want_loss=True, want_grad=True):
    """Per-row losses and dlogits of (N, C) logits in one launch (either may be skipped).

    dlogits is scaled by g[row] (None: 1) times grad_scale, e.g. 1 / count for a mean loss."""
    logits, target = _c(logits), _c(target, np.int64)
    N, C = logits.shape
    loss = L.empty((N,), logits.dtype) if want_loss else None
    dlogits = L.empty((N, C), logits.dtype) if want_grad else None
    if N and C:
        L.run("cross_entropy.cu", f"cross_entropy_{L.suffix(logits.dtype)}", N, L.row_threads(C),
              (logits, target, ptr(None) if g is None else _c(g, logits.dtype), ptr(loss), ptr(dlogits), i32(C),
               i64(ignore_index), f64(label_smoothing), f64(grad_scale)))
    return loss, dlogits


def cross_entropy(logits, target, ignore_index, label_smoothing):
    return cross_entropy_with_grad(logits, target, None, ignore_index, label_smoothing, want_grad=False)[0]


def cross_entropy_backward(logits, target, g, ignore_index, label_smoothing):
    return cross_entropy_with_grad(logits, target, g, ignore_index, label_smoothing, want_loss=False)[1]


# ---------------------------------------------------------------- norms

def _norm_forward(x, weight, bias, eps, n_dims, center):
    x = _c(x)
    F = int(np.prod(x.shape[x.ndim - n_dims:]))
    rows = x.size // max(F, 1)
    y = L.empty(x.shape, x.dtype)
    w, b = _acc(weight, x), _acc(bias, x)  # (named: a temporary's memory could be reused before the launch)
    if rows and F:
        L.run("norms.cu", f"norm_fwd_{L.suffix(x.dtype)}", rows, L.row_threads(F),
              (x, ptr(w), ptr(b), y, i32(F), f64(eps), i32(center)))
    return y


def _norm_backward(x, weight, g, eps, n_dims, center):
    x = _c(x)
    g = _c(g, x.dtype)
    norm_shape = x.shape[x.ndim - n_dims:]
    F = int(np.prod(norm_shape))
    rows = x.size // max(F, 1)
    dx = L.empty(x.shape, x.dtype)
    dweight = L.empty(norm_shape, x.dtype)  # cpu.py gives the weight gradients x's dtype
    dbias = L.empty(norm_shape, x.dtype)
    blocks = max(1, min(rows, 4 * cp.cuda.Device().attributes["MultiProcessorCount"]))
    partial = cp.zeros((blocks, 2, F), dtype=np.float64)
    if rows and F:
        w = _acc(weight, x)
        L.run("norms.cu", f"norm_bwd_{L.suffix(x.dtype)}", blocks, min(L.row_threads(F), 256),
              (x, ptr(w), g, dx, partial, i64(rows), i32(F), f64(eps), i32(center)))
    for out, offset in ((dweight, 0), (dbias, F)):
        if F:
            L.run("reduce.cu", f"sum_partials_{L.suffix(x.dtype)}", L.grid_1d(F), 256,
                  (partial.reshape(-1)[offset:], out, i32(blocks if rows else 0), i32(F), i64(2 * F)))
    return dx, dweight, dbias


def layer_norm(x, weight, bias, eps, n_dims):
    return _norm_forward(x, weight, bias, eps, n_dims, center=1)


def layer_norm_backward(x, weight, g, eps, n_dims):
    return _norm_backward(x, weight, g, eps, n_dims, center=1)


def rms_norm(x, weight, eps, n_dims):
    return _norm_forward(x, weight, None, eps, n_dims, center=0)


def rms_norm_backward(x, weight, g, eps, n_dims):
    return _norm_backward(x, weight, g, eps, n_dims, center=0)[:2]


# ---------------------------------------------------------------- activations

def _elementwise(kernel, x, *rest, extra=()):
    x = _c(x)
    y = L.empty(x.shape, x.dtype)
    if x.size:
        L.run("activations.cu", f"{kernel}_{L.suffix(x.dtype)}", L.grid_1d(x.size, 256, 4), 256,
              (x, *[_c(r, x.dtype) for r in rest], y, i64(x.size), *extra))
    return y


def gelu(x, approximate="none"):
    return _elementwise("gelu_fwd", x, extra=(i32(approximate == "tanh"),))


def gelu_backward(x, g, approximate="none"):
    return _elementwise("gelu_bwd", x, g, extra=(i32(approximate == "tanh"),))


def silu(x):
    return _elementwise("silu_fwd", x)


def silu_backward(x, g):
    return _elementwise("silu_bwd", x, g)


def swiglu(h):
    h = _c(h)
    F = h.shape[-1] // 2
    y = L.empty(h.shape[:-1] + (F,), h.dtype)
    if y.size:
        L.run("activations.cu", f"swiglu_fwd_{L.suffix(h.dtype)}", L.grid_1d(y.size, 256, 4), 256,
              (h, y, i64(y.size), i64(F)))
    return y


def swiglu_backward(h, g):
    h = _c(h)
    F = h.shape[-1] // 2
    dh = L.empty(h.shape, h.dtype)
    if dh.size:
        L.run("activations.cu", f"swiglu_bwd_{L.suffix(h.dtype)}", L.grid_1d(g.size, 256, 4), 256,
              (h, _c(g, h.dtype), dh, i64(g.size), i64(F)))
    return dh


# ---------------------------------------------------------------- rope, embedding, dropout

def rope(x, cos, sin, inverse):
    x = _c(x)
    T, D = x.shape[-2], x.shape[-1]
    half = D // 2
    rows = x.size // max(D, 1)
    y = L.empty(x.shape, x.dtype)
    if rows and half:
        L.run("rope.cu", f"rope_{L.suffix(x.dtype)}", L.grid_1d(rows * half), 256,
              (x, _acc(cos, x), _acc(sin, x), y, i64(rows), i32(T), i32(half), i32(bool(inverse))))
    return y


def embedding(weight, idx):
    weight, idx = _c(weight), _c(idx, np.int64)
    D = int(np.prod(weight.shape[1:]))
    out = L.empty(idx.shape + weight.shape[1:], weight.dtype)
    n = idx.size
    if n and D:
        size = weight.dtype.itemsize
        L.run("embedding.cu", f"embedding_fwd_{size}", min(n, 65535 * 8), min(1024, max(32, D)),
              (weight, idx, out, i64(n), i32(D), i64(weight.shape[0])))
    return out


def embedding_backward(idx, g, num_embeddings):
    D = g.shape[-1]
    flat = _c(idx, np.int64).reshape(-1)
    g = _c(g)
    out = cp.zeros((num_embeddings, D), dtype=g.dtype)
    n = flat.size
    if n and D:
        order = cp.argsort(flat)  # CuPy sorts with a stable radix sort: equal ids keep their order
        sorted_idx = cp.ascontiguousarray(flat[order])
        L.run("embedding.cu", f"embedding_bwd_{L.suffix(g.dtype)}", min(n, 65535 * 8), min(1024, max(32, D)),
              (sorted_idx, order.astype(np.int64, copy=False), g, out, i64(n), i32(D), i64(num_embeddings)))
    return out


def dropout(x, seed, p):
    x = _c(x)
    y = L.empty(x.shape, x.dtype)
    if x.size:
        L.run("dropout.cu", f"dropout_{L.suffix(x.dtype)}", L.grid_1d(-(-x.size // 4)), 256,
              (x, y, i64(x.size), np.uint64(seed), f64(p), f64(1.0 / (1.0 - p))))
    return y


# ---------------------------------------------------------------- attention

def _attention_probs(q, k, mask, scale, causal, window):
    """Softmax weights (B, Hkv, G, T, S): scores by cuBLAS, scale + masks + softmax in one kernel."""
    from gradcraft.backend.cuda.matmul import matmul
    B, H, T, D = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    qg = q.reshape(B, Hkv, H // Hkv, T, D)
    scores = matmul(qg, cp.swapaxes(k[:, :, None], -1, -2))  # (B, Hkv, G, T, S), unscaled
    additive = None
    if mask is not None:
        m = cp.broadcast_to(mask, (B, H, T, S)).reshape(B, Hkv, H // Hkv, T, S)
        additive = (cp.where(m, 0.0, -np.inf) if m.dtype == np.bool_ else m).astype(np.float32)
    return softmax_rows(scores, scale, additive, causal, window, T, S)


def _wide_attention(fn):
    """Half-precision attention runs in float32 and rounds once at the end, as cpu.py does."""
    def kernel(q, k, v, *rest, **attrs):
        if q.dtype not in L.HALF:
            return fn(q, k, v, *rest, **attrs)
        rest = [L.wide(r) if r is not None and r.dtype in L.HALF else r for r in rest]
        out = fn(L.wide(q), L.wide(k), L.wide(v), *rest, **attrs)
        if isinstance(out, tuple):
            return tuple(L.finish(o, a.dtype) for o, a in zip(out, (q, k, v)))
        return L.finish(out, q.dtype)
    return kernel


@_wide_attention
def sdpa(q, k, v, mask=None, *, scale, causal, window):
    from gradcraft.backend.cuda.matmul import matmul
    B, H, T, D = q.shape
    p = _attention_probs(q, k, mask, scale, causal, window)
    out = matmul(p, v[:, :, None])  # (B, Hkv, G, T, Dv)
    return cp.ascontiguousarray(out.reshape(B, H, T, v.shape[-1]))


@_wide_attention
def sdpa_backward(q, k, v, g, mask=None, *, scale, causal, window):
    from gradcraft.backend.cuda.matmul import matmul
    B, H, T, D = q.shape
    Hkv = k.shape[1]
    p = _attention_probs(q, k, mask, scale, causal, window)  # recomputed, as flash attention does
    gg = g.reshape(B, Hkv, H // Hkv, T, v.shape[-1])
    G = H // Hkv
    dv = matmul(cp.swapaxes(p, -1, -2), gg)
    dv = dv[:, :, 0] if G == 1 else dv.sum(axis=2)  # (a size-1 sum would still launch a reduction)
    dp = matmul(gg, cp.swapaxes(v[:, :, None], -1, -2))
    ds = softmax_rows_backward(p, dp, scale)
    dq = matmul(ds, k[:, :, None]).reshape(B, H, T, D)
    dk = matmul(cp.swapaxes(ds, -1, -2), q.reshape(B, Hkv, G, T, D))
    dk = dk[:, :, 0] if G == 1 else dk.sum(axis=2)
    return cp.ascontiguousarray(dq), cp.ascontiguousarray(dk), cp.ascontiguousarray(dv)


def masked_softmax(scores, mask=None, *, scale, causal, window):
    """Attention weights from raw scores (..., T, S): scale, masks and softmax in one kernel."""
    T, S = scores.shape[-2:]
    additive = None
    if mask is not None:
        m = cp.broadcast_to(mask, scores.shape)
        additive = cp.ascontiguousarray((cp.where(m, 0.0, -np.inf) if m.dtype == np.bool_ else m).astype(np.float32))
    return softmax_rows(scores, scale, additive, causal, window, T, S)


def masked_softmax_backward(p, g, *, scale):
    return softmax_rows_backward(p, g, scale)
