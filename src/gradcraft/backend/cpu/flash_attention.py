"""References of the flash-attention kernels (cuda/kernels/flash_attention.cu): the output and each
query's log-sum-exp, and the gradients recomputed from them."""

import numpy as np

from gradcraft.backend import philox
from gradcraft.backend.cpu.common import _finish, _wide
from gradcraft.backend.cpu.softmax import _position_mask


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


def _flash_attention_backward(q, k, v, out, lse, g, state=None, *, scale, causal, window, dropout_p=0.0, stream=0):
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


KERNELS = {"flash_attention": _flash_attention, "flash_attention_backward": _flash_attention_backward}
