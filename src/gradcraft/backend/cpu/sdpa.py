"""Scaled dot-product attention with the weights materialised, and its gradient (cuda/sdpa.py)."""

import numpy as np

from gradcraft.backend.cpu.common import _finish, _out, _wide
from gradcraft.backend.cpu.softmax import _position_mask
from gradcraft.backend.cpu.threads import _parallel


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


def _sdpa(q, k, v, mask=None, *, scale, causal, window):
    B, H, T, D = q.shape
    Hkv, Dv = k.shape[1], v.shape[-1]
    et, sums = _attention_weights(q, k, mask, scale, causal, window)  # (B, Hkv, S, G*T), (B, Hkv, G*T, 1)
    vw = _wide(v)
    out = _out((B, Hkv, (H // Hkv) * T, Dv), vw.dtype)
    np.matmul(et.swapaxes(-1, -2), vw, out=out)
    out /= sums
    return _finish(out.reshape(B, H, T, Dv), q.dtype)


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


KERNELS = {"sdpa": _sdpa, "sdpa_backward": _sdpa_backward}
