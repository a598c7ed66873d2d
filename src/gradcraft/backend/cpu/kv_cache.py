"""Decoding through fixed KV caches, in NumPy: the reference of kernels/kv_cache.cu.

A cache is (B, Hkv, L, D). Row b's newest token sits at position[b] (position[0] when one position
serves every row) and is stored at slot position % L (L the context, or a sliding window's ring);
the filled slots are then [0, min(position + 1, L)).
"""

import numpy as np

from gradcraft.backend.cpu.common import _finish, _wide
from gradcraft.backend.cpu.rope import _rope


def _positions(position, rows: int) -> np.ndarray:
    position = np.asarray(position, dtype=np.int64).reshape(-1)
    return np.broadcast_to(position, (rows,))


def write_at(target, value, index, dim):
    """target[b, ..., index[b] % L, ...] = value[b, ..., 0, ...] along `dim`, in place."""
    moved = np.moveaxis(target, dim, 1)  # a view: (B, L, ...)
    slots = _positions(index, target.shape[0]) % target.shape[dim]
    moved[np.arange(target.shape[0]), slots] = np.moveaxis(value, dim, 1)[:, 0]
    return target


def _kv_attention(q, k, v, position, scale):
    """(B, H, 1, D): each row's query against the filled slots of its KV head's cache."""
    B, H = q.shape[:2]
    Hkv, length = k.shape[1], k.shape[2]
    group = H // Hkv
    filled = np.clip(_positions(position, B) + 1, 0, length)  # (positions are >= 0: n >= 1)
    qw, kw, vw = _wide(q), _wide(k), _wide(v)
    out = np.empty(q.shape, dtype=qw.dtype)
    for b in range(B):
        n = filled[b]
        if n == 0:  # nothing to attend to (a negative position): NaN, as attention with every key masked
            out[b] = np.nan
            continue
        keys = np.repeat(kw[b, :, :n], group, axis=0)  # (H, n, D): each KV head for its query heads
        values = np.repeat(vw[b, :, :n], group, axis=0)
        scores = (qw[b] @ keys.transpose(0, 2, 1)) * scale  # (H, 1, n)
        weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
        weights /= weights.sum(axis=-1, keepdims=True)
        out[b] = weights @ values
    return _finish(out, q.dtype)


def rotate_rows(x, cos, sin):
    """Rotary embedding of x (B, H, 1, D) with row b's angles in row b of cos/sin (B, D/2), or row 0
    for every row (1, D/2): the B rows take rope's position axis."""
    if cos.shape[0] == 1:
        return _rope(x, cos, sin, False)
    return np.ascontiguousarray(np.swapaxes(_rope(np.swapaxes(x, 0, 2), cos, sin, False), 0, 2))


def _kv_append_attention(q, k, v, position, key, value, *rope, scale, rotary):
    """Write this step's key and value (B, Hkv, 1, D) into slot position % L of the caches k and v (in
    place), the query and key rotated first when `rotary` (rope = cos, sin), then _kv_attention."""
    if rotary:
        q, key = rotate_rows(q, *rope), rotate_rows(key, *rope)
    write_at(k, key.astype(k.dtype, copy=False), position, 2)
    write_at(v, value.astype(v.dtype, copy=False), position, 2)
    return _kv_attention(q, k, v, position, scale)


KERNELS = {"kv_attention": _kv_attention, "kv_append_attention": _kv_append_attention}
