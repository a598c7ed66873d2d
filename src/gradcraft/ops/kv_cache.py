"""Decoding through fixed KV caches: a step's keys and values written into their slots, and each
row's query attending to the filled slots (the kernels: backend/cpu/kv_cache.py, kernels/kv_cache.cu).

A cache is (B, Hkv, L, D), allocated once. Row b's newest token sits at `position[b]` >= 0 (an int64
tensor of (B,) positions, or (1,) shared by every row, kept on the device so that a captured step
replays unchanged) and is stored at slot position % L: L is the context for a plain cache, the window
for a sliding-window ring. The filled slots are then [0, min(position + 1, L)), in whatever order:
keys are rotated before they are stored, and attention does not depend on the keys' order.

Inference only: neither op has a gradient (flash-attn's `flash_attn_with_kvcache` plays this part in
PyTorch programs).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor

from gradcraft import dtypes
from gradcraft.backend import opspec
from gradcraft.device import get_backend
from gradcraft.errors import UserError
from gradcraft.ops import elementwise as ew
from gradcraft.ops.function import apply


def _check_position(position: Tensor, rows: int, op: str) -> None:
    if position.dtype != dtypes.int64 or position.numel() not in (1, rows):
        raise UserError(
            f"{op}: position must be int64 with 1 or {rows} elements, got {position.dtype.name} {position.shape}"
        )


def kv_cache_write(cache: Tensor, value: Tensor, position: Tensor) -> Tensor:
    """Write value (B, Hkv, 1, D) into cache (B, Hkv, L, D) at slot position % L of each row, in
    place (when realized); returns the cache's new contents (read them, not `cache`, in the same step)."""
    if cache.ndim != 4 or value.ndim != 4 or value.shape != (*cache.shape[:2], 1, cache.shape[3]):
        raise UserError(f"kv_cache_write: value must be (B, Hkv, 1, D) for a cache {cache.shape}, got {value.shape}")
    _check_position(position, cache.shape[0], "kv_cache_write")
    if not cache.is_realized:  # the write goes into the cache's own buffer
        cache.realize()
    value = ew.cast(value, cache.dtype)
    return apply(opspec.ASSIGN, (cache, value, position), {"dim": 2}, cache.shape, cache.dtype)


def kv_cache_attention(
    query: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    position: Tensor,
    scale: float | None = None,
    key: Tensor | None = None,
    value: Tensor | None = None,
    rotary: tuple | None = None,
) -> Tensor:
    """softmax(q k^T * scale) v for query (B, H, 1, D) over the filled slots of k_cache and v_cache
    (B, Hkv, L, D): [0, min(position + 1, L)) of each row. H a multiple of Hkv (grouped-query heads).

    key, value (B, Hkv, 1, D): this step's keys and values, written into slot position % L of the
    caches first (in place, as kv_cache_write does), and rotary = (cos, sin), (B or 1, D/2): the
    query and the key rotated first (rotate-half, F.rotary_embedding's; row b's angles, or row 0's
    for all). Where the device has the kernel (backend `kv_append_supported`) the rotation, the
    writes and the attention are one launch (flash-attn's flash_attn_with_kvcache does the same);
    elsewhere they are the separate ops."""
    if query.ndim != 4 or query.shape[2] != 1 or k_cache.ndim != 4 or v_cache.shape != k_cache.shape:
        raise UserError(
            f"kv_cache_attention: query must be (B, H, 1, D) and the caches (B, Hkv, L, D) alike, got "
            f"{query.shape}, {k_cache.shape}, {v_cache.shape}"
        )
    B, H, _, D = query.shape
    if k_cache.shape[0] != B or k_cache.shape[3] != D or H % k_cache.shape[1]:
        raise UserError(f"kv_cache_attention: a query {query.shape} does not fit caches {k_cache.shape}")
    if k_cache.dtype != query.dtype or v_cache.dtype != query.dtype:
        raise UserError("kv_cache_attention: the query and the caches must share a dtype")
    _check_position(position, B, "kv_cache_attention")
    if key is not None or value is not None or rotary is not None:
        return _append_attention(query, k_cache, v_cache, position, scale, key, value, rotary)
    attrs = {"scale": float(scale if scale is not None else 1.0 / math.sqrt(D))}
    inputs = (query, k_cache, v_cache, position)
    if not get_backend(query.device).kv_attention_supported(query.dtype.np, k_cache.shape[2], D):
        from gradcraft.ops.fallback import kv_attention

        return kv_attention(*inputs, **attrs)
    return apply(opspec.KV_ATTENTION, inputs, attrs, query.shape, query.dtype)


def _rotate_rows(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x (B, H, 1, D) rotated by row b's angles (cos/sin (B, D/2)) or row 0's ((1, D/2))."""
    from gradcraft.ops.nn import rotary_embedding

    if cos.shape[0] == 1:
        return rotary_embedding(x, cos, sin)
    return rotary_embedding(x.transpose(0, 2), cos, sin).transpose(0, 2)  # the rows take the T axis


def _append_attention(query, k_cache, v_cache, position, scale, key, value, rotary) -> Tensor:
    if key is None or value is None or key.shape != (k_cache.shape[0], k_cache.shape[1], 1, k_cache.shape[3]):
        raise UserError(
            f"kv_cache_attention: key and value must both be (B, Hkv, 1, D) for caches {k_cache.shape}, got "
            f"{None if key is None else key.shape} and {None if value is None else value.shape}"
        )
    if value.shape != key.shape or key.dtype != query.dtype or value.dtype != query.dtype:
        raise UserError("kv_cache_attention: key and value must match each other and the query's dtype")
    if rotary is not None:
        cos, sin = rotary
        D = query.shape[-1]
        if cos.shape != sin.shape or cos.ndim != 2 or cos.shape[1] * 2 != D or cos.shape[0] not in (1, query.shape[0]):
            raise UserError(f"kv_cache_attention: rotary cos and sin must be (B or 1, {D // 2}), got {cos.shape}")
    backend = get_backend(query.device)
    D = query.shape[-1]
    if backend.kv_append_supported(query.dtype.np, k_cache.shape[2], D):
        for cache in (k_cache, v_cache):
            if not cache.is_realized:  # the writes go into the caches' own buffers
                cache.realize()
        if rotary is not None:  # (the tables in the kernels' accumulator type, as rope's)
            acc = dtypes.float64 if query.dtype == dtypes.float64 else dtypes.float32
            rotary = tuple(ew.cast(t, acc) if t.dtype != acc else t for t in rotary)
        attrs = {"scale": float(scale if scale is not None else 1.0 / math.sqrt(D)), "rotary": rotary is not None}
        inputs = (query, k_cache, v_cache, position, key, value, *(rotary or ()))
        return apply(opspec.KV_APPEND_ATTENTION, inputs, attrs, query.shape, query.dtype)
    if rotary is not None:
        query, key = _rotate_rows(query, *rotary), _rotate_rows(key, *rotary)
    k_new = kv_cache_write(k_cache, key, position)
    v_new = kv_cache_write(v_cache, value, position)
    return kv_cache_attention(query, k_new, v_new, position, scale)
