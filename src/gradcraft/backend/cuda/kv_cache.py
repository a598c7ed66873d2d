"""Decoding through fixed KV caches: launchers for kernels/kv_cache.cu.

`kv_attention` is one kernel per step and layer where the generic path (masks, casts, two matrix
products and a softmax over the whole cache) takes a dozen; `write_at` is the indexed form of the
`assign` kernel (creation.py): one token's keys or values written into their cache slot, instead of
the whole cache rewritten. The NumPy references are in backend/cpu/kv_cache.py.
"""

import functools

import cupy as cp
import numpy as np

from gradcraft.backend.cuda import launch as L

FILE = "kv_cache.cu"
THREADS = 256
MAX_HEAD_DIM = 256  # the kernel keeps the query in a 256-value shared array (KV_MAX_HEAD_DIM)
# The kernel's fixed shared arrays, at most: the query (256 values) and a reduction's 32, in float64.
_STATIC_SHARED = (MAX_HEAD_DIM + 32) * 8


@functools.cache
def _optin_limit(device_id: int) -> int:
    """The most shared memory one block may ask for on this GPU (227 KB on an H100/H200, 163 KB on an
    A100, 99 KB on most consumer cards)."""
    attributes = cp.cuda.Device(device_id).attributes
    return int(attributes.get("MaxSharedMemoryPerBlockOptin", L.DEFAULT_SHARED))


def _shared_bytes(length: int, dtype) -> int:
    """The dynamic shared memory of kv_attention for a cache of `length` slots (its scores)."""
    return (length + THREADS) * L.acc_dtype(dtype).itemsize


def supported(dtype, length: int, head_dim: int) -> bool:
    """Whether the kernel takes this case on the current GPU (else the op layer composes it)."""
    if _split_lanes(dtype, head_dim):
        return True  # kv_attention_split: shared memory independent of the length
    fits = _shared_bytes(length, dtype) + _STATIC_SHARED <= _optin_limit(cp.cuda.Device().id)
    return np.dtype(dtype) in L.FLOAT and head_dim <= MAX_HEAD_DIM and fits


def _positions(position, rows: int):
    position = L.contiguous(position.reshape(-1).astype(np.int64, copy=False))
    if position.size not in (1, rows):
        raise ValueError(f"kv cache: {position.size} positions for {rows} rows")
    return position, L.i32(position.size != 1)


def write_at(target, value, index, dim):
    """target[b, h, index[b] % L] = value[b, h, 0] for a (B, Hkv, L, D) cache (dim 2), in place."""
    if target.ndim != 4 or dim != 2 or not target.flags.c_contiguous or np.dtype(target.dtype) not in L.FLOAT:
        moved = cp.moveaxis(target, dim, 1)  # the generic way: (B, L, ...) fancy indexing
        slots = cp.broadcast_to(index.reshape(-1), (target.shape[0],)) % target.shape[dim]
        moved[cp.arange(target.shape[0]), slots] = cp.moveaxis(value, dim, 1)[:, 0]
        return target
    B, Hkv, length, D = target.shape
    value = L.contiguous(value.astype(target.dtype, copy=False))
    position, per_row = _positions(index, B)
    total = B * Hkv * D
    if total:
        L.run(
            FILE,
            f"kv_write_{L.suffix(target.dtype)}",
            L.grid_1d(total),
            256,
            (value, position, per_row, target, L.i64(B), L.i32(Hkv), L.i64(length), L.i32(D)),
        )
    return target


def _split_lanes(dtype, D: int) -> int:
    """Threads that read one key row in kv_attention_split (16 bytes each), or 0 where that kernel
    does not apply (float64, or D / VEC not a power of two up to 32)."""
    if np.dtype(dtype) not in _SPLIT_TYPES:
        return 0
    per_access = 16 // np.dtype(dtype).itemsize
    lanes = D // per_access
    return lanes if D % per_access == 0 and 1 <= lanes <= 32 and lanes & (lanes - 1) == 0 else 0


_SPLIT_TYPES = {np.dtype(np.float32), *L.HALF}
ROUNDS = 4  # KV_ROUNDS in kernels/kv_cache.cu


def _chunks(rows: int, length: int, groups: int) -> tuple[int, int]:
    """(splits, slots a chunk) for `rows` (b, h) pairs: enough blocks for ~4 a multiprocessor, no chunk
    under one round of reads. (More than one split only while rows < 4 multiprocessors.)"""
    splits = min(-(-length // (ROUNDS * groups)), max(1, -(-4 * L.sm_count() // rows)))
    chunk = -(-length // splits)
    return -(-length // chunk), chunk


def _kv_attention_split(q, k, v, position, per_row, scale, lanes, new=None):
    """kv_attention_split: each (b, h)'s slots in chunks, one block each, so that a single sequence's
    few heads still fill the GPU; the last block of each (b, h) to finish merges the chunks.
    new: kv_append_attention's extra arguments (this step's token), which picks that kernel."""
    B, H, _, D = q.shape
    Hkv, length = k.shape[1], k.shape[2]
    groups = THREADS // lanes
    splits, chunk = _chunks(B * H, length, groups)
    out = L.empty((B, H, 1, D), q.dtype)
    partial = L.empty((B * H * splits * (D + 2),), np.float32) if splits > 1 else None
    counters = L.block_counters(B * H) if splits > 1 else np.uint64(0)  # (at 0 between launches)
    shared = 4 * groups * (D + 2)
    name = "kv_append_attention" if new is not None else "kv_attention_split"
    fn = L.with_shared(FILE, f"{name}_{L.suffix(q.dtype)}", shared, 3 * MAX_HEAD_DIM * 4)
    args = (q, k, v, position, per_row, out, L.ptr(partial), counters, L.i32(H), L.i32(Hkv), L.i64(length))
    args += (L.i32(D), np.float32(scale), L.i32(chunk)) + (new or ())
    fn((B * H, splits), (THREADS,), args, shared_mem=shared)
    return out


def _rows_of_heads(x):
    """x (B, heads, 1, D) as the kernel reads it, and its row stride in elements: a view of a
    projection's output (heads side by side in each row) as it is, anything else copied."""
    item = x.itemsize
    if x.strides[3] == item and (x.shape[1] == 1 or x.strides[1] == x.shape[3] * item) and x.strides[0] % item == 0:
        return x, L.i64(x.strides[0] // item if x.shape[0] > 1 else 0)
    x = cp.ascontiguousarray(x)
    return x, L.i64(x.shape[1] * x.shape[3])


def append_supported(dtype, length: int, head_dim: int) -> bool:
    """Where kv_append_attention runs (the split kernel's cases); elsewhere the op layer composes."""
    return bool(_split_lanes(dtype, head_dim)) and length > 0 and head_dim % 2 == 0


def _kv_append_attention(q, k, v, position, key, value, *rope, scale, rotary):
    """This step's key and value written into slot position % L of the caches k and v (in place),
    the query and key rotated first when `rotary` (rope = cos, sin: (1 or B, D/2) float32), then each
    row's query against its filled slots: one launch of kv_append_attention (kernels/kv_cache.cu)."""
    B, H, _, D = q.shape
    if not (k.flags.c_contiguous and v.flags.c_contiguous and L.aligned(k, v)):
        raise ValueError("kv_append_attention: the caches must be contiguous, 16-byte aligned buffers")
    lanes = _split_lanes(q.dtype, D)
    position, per_row = _positions(position, B)
    q, q_stride = _rows_of_heads(q)
    key, k_stride = _rows_of_heads(key.astype(q.dtype, copy=False))
    value, v_stride = _rows_of_heads(value.astype(q.dtype, copy=False))
    if rotary:
        cos, sin = (L.contiguous(t.astype(np.float32, copy=False)) for t in rope)
        tables = (cos, sin, L.i32(cos.shape[0] != 1))
    else:
        tables = (L.ptr(None), L.ptr(None), L.i32(0))
    new = (key, value, q_stride, k_stride, v_stride) + tables
    return _kv_attention_split(q, k, v, position, per_row, scale, lanes, new)


def _kv_attention(q, k, v, position, scale):
    """(B, H, 1, D) attention of each row's query over the first min(position + 1, L) slots of its
    (B, Hkv, L, D) caches."""
    B, H, _, D = q.shape
    Hkv, length = k.shape[1], k.shape[2]
    q, k, v = L.contiguous(q), L.contiguous(k), L.contiguous(v)
    position, per_row = _positions(position, B)
    lanes = _split_lanes(q.dtype, D)
    if lanes and length:
        q, k, v = (a if L.aligned(a) else a.copy() for a in (q, k, v))  # (16-byte rows from here on)
        return _kv_attention_split(q, k, v, position, per_row, scale, lanes)
    out = L.empty((B, H, 1, D), q.dtype)
    shared = _shared_bytes(length, q.dtype)
    fn = L.with_shared(FILE, f"kv_attention_{L.suffix(q.dtype)}", shared, _STATIC_SHARED)
    fn(
        (B * H,),
        (THREADS,),
        (q, k, v, position, per_row, out, L.i32(H), L.i32(Hkv), L.i64(length), L.i32(D), np.float64(scale)),
        shared_mem=shared,
    )
    return out


KERNELS = {"kv_attention": _kv_attention, "kv_append_attention": _kv_append_attention}
