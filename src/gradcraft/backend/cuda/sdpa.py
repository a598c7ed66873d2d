"""Explicit attention on the GPU: scores by cuBLAS, scale + masks + softmax in one kernels/softmax.cu
launch (sdpa and its gradient; backend/cpu/sdpa.py is their reference; the masked softmax alone is
softmax.py's). Flash attention is flash_attention.py."""

import cupy as cp
import numpy as np

from gradcraft.backend.cuda import launch as L
from gradcraft.backend.cuda.softmax import softmax_rows, softmax_rows_backward


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
    """Half-precision attention runs in float32 and rounds once at the end, as backend/cpu/sdpa.py does."""

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


KERNELS = {"sdpa": sdpa, "sdpa_backward": sdpa_backward}
