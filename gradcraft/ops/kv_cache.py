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
    if cache._buf is None:  # the write goes into the cache's own buffer
        cache.realize()
    value = ew.cast(value, cache.dtype)
    return apply("assign", (cache, value, position), {"dim": 2}, cache.shape, cache.dtype)


def kv_cache_attention(
    query: Tensor, k_cache: Tensor, v_cache: Tensor, position: Tensor, scale: float | None = None
) -> Tensor:
    """softmax(q k^T * scale) v for query (B, H, 1, D) over the filled slots of k_cache and v_cache
    (B, Hkv, L, D): [0, min(position + 1, L)) of each row. H a multiple of Hkv (grouped-query heads)."""
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
    attrs = {"scale": float(scale if scale is not None else 1.0 / math.sqrt(D))}
    inputs = (query, k_cache, v_cache, position)
    if not get_backend(query.device).kv_attention_supported(query.dtype.np, k_cache.shape[2], D):
        from gradcraft.ops.fallback import kv_attention

        return kv_attention(*inputs, **attrs)
    return apply("kv_attention", inputs, attrs, query.shape, query.dtype)
