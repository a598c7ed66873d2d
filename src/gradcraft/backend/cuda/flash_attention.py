"""Flash attention on the GPU: launchers for kernels/flash_attention.cu.

`flash_attention` returns the attention output and the rows' log-sum-exp (float32), which is all the
backward pass keeps; `flash_attention_backward` recomputes the probabilities tile by tile from it.
The NumPy references are `_flash_attention` and `_flash_attention_backward` in backend/cpu/flash_attention.py.
"""

import functools
import math
import operator
import os

import cupy as cp
import numpy as np

from gradcraft.backend import philox
from gradcraft.backend.cuda import compiler
from gradcraft.backend.cuda import launch as L
from gradcraft.backend.cuda import packed
from gradcraft.backend.cuda.flash_variants import (  # noqa: F401  (attention.X, as the benches and tests name them)
    HOPPER_DIMS,
    FUSED,
    FUSED_OVERLAP,
    PIPELINED,
    WARP_SPECIALIZED,
    WARP_SPECIALIZED_SERIAL,
    PERSISTENT,
    PERSISTENT_SERIAL,
    PINGPONG,
    PERSISTENT_PINGPONG,
    WARP_SPECIALIZED_KINDS,
    PERSISTENT_KINDS,
    PRODUCTION_VARIANTS,
    HOPPER_TILES,
    DETERMINISTIC_TILES,
)

FILE = "flash_attention.cu"
# the forward on wgmma (sm_90a: H100, H200), and the backward's dq and dk/dv kernels on wgmma
HOPPER_FILE, HOPPER_BWD_FILE = compiler.HOPPER_FILES
WARPGROUP = 128  # threads
HEAD_DIMS = (32, 48, 64, 96, 128)
THREADS = 128
_PAD = 8  # u16 elements of padding per shared-memory row (as FA_PAD in the kernel file)


def supported(dtype, head_dim: int, value_dim: int) -> bool:
    """Whether the tensor-core kernels take this case (bf16/fp16, one of HEAD_DIMS, dv = d)."""
    return np.dtype(dtype) in L.HALF and head_dim == value_dim and head_dim in HEAD_DIMS


def _name(kind: str, dtype, head_dim: int, dropout: bool = False) -> str:
    return f"flash_{kind}_{'dropout_' if dropout else ''}{L.suffix(dtype)}_d{head_dim}"


# Every kernel here launches through packed.Launch: prepared once per shape and layout (the launch
# plans below), then each call packs its pointers and launches, where CuPy's kernel call converted some
# 30 NumPy scalars each time (the eager call's host time: bench/attention_host.py,
# BENCHMARK.md). The kernels' parameters, as struct formats ("P" a device pointer, "q" int64, "i" int32, "I"
# uint32, "f" float32), start with the pointers a call passes.
_SHAPE = "iiiifii"  # H, Hkv, T, S, scale, causal, window
_DROP = "PIIf"  # the dropout state, stream id, threshold and scale (the mma.sync kernels only)
FWD_TYPES = "P" * 5 + "q" * 12 + _SHAPE  # q, k, v, out, lse; their strides; the shape
PERSISTENT_FWD_TYPES = FWD_TYPES + "iP"  # B * H, the work counter
DQ_TYPES = "P" * 7 + "q" * 15 + _SHAPE  # q, k, v, dO, lse, dvec, dq; strides of q, k, v, dO, dq
DKDV_TYPES = "P" * 8 + "q" * 15 + _SHAPE  # ... dk, dv; strides of q, k, v, dO, dk (= dv's)
FUSED_TYPES = "P" * 9 + "q" * 15 + _SHAPE  # ... dk, dv, dq_acc
WS_BWD_TYPES = "P" * 10 + "q" * 15 + _SHAPE + "i"  # ... dk, dv, dq_acc, dkv_acc; ...; parts (hopper_bwd_ws)
CONVERT_TYPES = "PP" + "q" * 3 + "iif"  # dq_acc, dq, dq's strides, H, T, scale
DOT_TYPES = "P" * 4 + "q" * 6 + "iii" + "qq"  # O, dO, dvec, what it zeroes; strides of O, dO; H, T, D; rows, float4s

_NO_DROPOUT = (0, 0, 0, 1.0)


def _dropout_args(state, dropout_p, stream) -> tuple:
    """The mma.sync kernels' dropout arguments: the device's [seed, counter] (contiguous, and held by the
    caller until the launch; read when the kernel runs, so a replayed graph draws new masks), the
    stream id, backend/philox.py's 16-bit threshold and scale."""
    if not dropout_p:
        return _NO_DROPOUT
    return (state.data.ptr, int(stream), int(philox.threshold(dropout_p)), float(philox.keep_scale(dropout_p)))


_functions: dict = {}  # (file, kernel, device) -> (its CUfunction, the dynamic shared memory it may use)
_MAX_DYNAMIC_SHARED = 8  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES


def _function(file: str, name: str, shared: int) -> int:
    """The CUfunction of kernel `name` of `file` on the current device, allowed `shared` bytes of dynamic
    shared memory (more than the 48 KB a launch gets without asking: an attribute, set when it grows)."""
    device = cp.cuda.runtime.getDevice()
    key = (file, name, device)
    entry = _functions.get(key)
    if entry is None or entry[1] < shared:
        if file == FILE:
            handle = L.with_shared(FILE, name, shared).kernel.ptr
        else:
            handle = compiler.hopper_function(file, name, device).ptr
            # (a Function of a loaded Module has no attribute setter; the driver call is what it would do)
            cp.cuda.driver.funcSetAttribute(handle, _MAX_DYNAMIC_SHARED, shared)
        entry = _functions[key] = (handle, max(shared, entry[1] if entry else 0))
    return entry[0]


def _prepare(file, name, grid, threads, shared, types, fixed) -> packed.Launch:
    return packed.Launch(_function(file, name, shared), grid, threads, shared, types, fixed)


@functools.lru_cache(maxsize=1024)
def _seq_major_strides(shape: tuple) -> tuple:
    """The element strides of a (B, heads, T, D) array laid out as (B, T, heads, D)."""
    B, heads, T, D = shape
    return (T * heads * D, D, heads * D, 1)


def _seq_major(shape, dtype, memory=None):
    """An output of shape (B, heads, T, D) laid out as (B, T, heads, D): the model's next step,
    transposing back to (B, T, heads * D), is then a view, not a copy. `memory`: pool memory of its
    size (L.scratch) that a kernel has been launched to write, or None for new memory. (The launchers
    take the memory first and build the array after their launches: constructing a CuPy array costs
    some 5 us of host time, which the device would otherwise wait through.)"""
    item = np.dtype(dtype).itemsize
    if memory is None:
        memory = L.scratch(math.prod(shape) * item)
    return cp.ndarray(shape, dtype, memory, strides=tuple(s * item for s in _seq_major_strides(shape)))


# The scalar arguments below are cached by value: an eager call would otherwise rebuild them for the same
# few layouts and shapes (bench/attention.py --host_profile shows where an eager call's host time goes).


@functools.lru_cache(maxsize=1024)
def _element_strides(strides: tuple, itemsize: int) -> tuple:
    """The first three byte strides in elements (the kernels' int64 arguments)."""
    return (strides[0] // itemsize, strides[1] // itemsize, strides[2] // itemsize)


def _strides(a):
    return _element_strides(a.strides, a.itemsize)


def _rows(a):
    """a (4-d) with its last axis contiguous and 16-byte aligned rows (the kernels load 16 bytes at a
    time), and its strides over the first three axes in elements."""
    s0, s1, s2, s3 = a.strides
    if s3 != a.itemsize or (a.data.ptr | s0 | s1 | s2) & 15:
        a = cp.ascontiguousarray(a)
    return a, _element_strides(a.strides, a.itemsize)


def _shape_args(q, k, scale, causal, window):
    H, Hkv, T, S = q.shape[1], k.shape[1], q.shape[2], k.shape[2]
    # (a window of S keys or more hides nothing: 0 says so, and keeps the kernels' int32 ranges in range)
    window = window if window and window < S else 0
    return _shape_scalars(H, Hkv, T, S, float(scale), bool(causal), int(window))


@functools.lru_cache(maxsize=1024)
def _shape_scalars(H, Hkv, T, S, scale, causal, window) -> tuple:
    return (H, Hkv, T, S, scale, int(causal), window)


@functools.cache
def _is_hopper(device_id: int) -> bool:
    return cp.cuda.Device(device_id).compute_capability == "90"


def hopper(dtype, head_dim: int, dropout_p: float = 0.0) -> bool:
    """Whether attention runs on the wgmma kernels (flash_hopper.cu, flash_hopper_bwd.cu): a
    compute-capability-9.0 device, one of HOPPER_DIMS, no attention dropout, and
    GRADCRAFT_HOPPER_ATTENTION not 0."""
    if dropout_p or head_dim not in HOPPER_DIMS or np.dtype(dtype) not in L.HALF:
        return False
    return os.environ.get("GRADCRAFT_HOPPER_ATTENTION", "1") != "0" and _is_hopper(cp.cuda.runtime.getDevice())


WS_BWD_STAGES = 2  # query/output-gradient stages of the warp-specialised backward (FHB_WS_STAGES)


def _ws_stages(head_dim: int, consumers: int) -> int:
    """Key/value stages of a warp-specialised forward (flash_hopper.cu's FH_WS_STAGES)."""
    return 3 if head_dim == 128 and consumers == 2 else 2


def hopper_fwd_kernel(dtype, head_dim: int, tiles) -> tuple:
    """(kernel name, threads a block, dynamic shared memory) of flash_hopper.cu's forward variant `tiles`
    (keys per tile, warpgroups[, kind]: flash_variants.py; the lab's, dev/cuda/flash_variants.py)."""
    block_n, wgs, *kind = tiles
    kind = kind[0] if kind else None
    threads, suffix, stages = WARPGROUP * wgs, f"w{wgs}", 2
    if kind == PIPELINED:
        suffix, stages = f"w{wgs}_p", 3
    elif kind in WARP_SPECIALIZED_KINDS:  # wgs consumer warpgroups and the producer
        threads, suffix, stages = WARPGROUP * (wgs + 1), f"c{wgs}_{kind}", _ws_stages(head_dim, wgs)
    # queries, keys and values by stage, alignment slack
    shared = (64 * wgs + 2 * stages * block_n) * head_dim * 2 + 1024
    return f"hopper_fwd_{L.suffix(dtype)}_d{head_dim}_n{block_n}_{suffix}", threads, shared


# ---------------------------------------------------------------- launch plans, by shape and layout
# Built on a call's first sight of its shapes, strides, dtype, attributes and variants on a device (the
# key: every argument below), then kept: an eager training or decoding loop repeats a handful of them.


@functools.lru_cache(maxsize=256)
def _forward_plan(device, dtype, shape, qs, ks, vs, outs, shape_args, tiles, blocks, drop, counters):
    """The forward's launch, taking the pointers of q, k, v, out and lse. tiles: the wgmma variant
    (flash_variants.py), or None for the mma.sync kernel (with `drop`, _dropout_args); blocks: a
    persistent variant's grid cap (None: one block an SM); counters: its work counter's pointer.
    (Variants the package's kernel files lack are launched from the file HOPPER_FILE names: dev/cuda/lab.py
    points it at the lab's.)"""
    B, H, T, D = shape
    fixed = (*qs, *ks, *vs, *outs, *shape_args)
    if tiles is None:
        shared = (128 + 2 * (32 if D >= 128 else 64)) * (D + _PAD) * 2  # query, key, value tiles (FWD_BLOCK_*)
        name = _name("fwd", dtype, D, drop[2] > 0)
        return _prepare(FILE, name, (-(-T // 128), B * H), THREADS, shared, FWD_TYPES + _DROP, (*fixed, *drop))
    name, threads, shared = hopper_fwd_kernel(dtype, D, tiles)
    wgs, kind = tiles[1], (tiles[2] if len(tiles) > 2 else None)
    grid, types = (-(-T // (64 * wgs)), B * H), FWD_TYPES
    if kind in PERSISTENT_KINDS:  # the tiles handed out by a counter at 0 between launches
        grid = (min(grid[0] * grid[1], blocks or L.sm_count()),)
        fixed, types = (*fixed, B * H, counters), PERSISTENT_FWD_TYPES
    return _prepare(HOPPER_FILE, name, grid, threads, shared, types, fixed)


def _counters(tiles) -> int:
    """The work counter of a persistent forward variant (0 for the others)."""
    return int(L.block_counters(1)) if tiles is not None and tiles[2:] and tiles[2] in PERSISTENT_KINDS else 0


def _hopper_fwd(q, k, v, out, lse, qs, ks, vs, scale, causal, window, tiles=None, blocks=None):
    """flash_hopper.cu's forward, variant `tiles` (HOPPER_TILES by default). `blocks` caps a persistent
    variant's grid (one block an SM by default), so a test can make each block take many tiles."""
    tiles = tuple(tiles or HOPPER_TILES["fwd"][q.shape[3]])
    strides = tuple(tuple(int(s) for s in a) for a in (qs, ks, vs))
    shape = _shape_args(q, k, scale, causal, window)
    device = cp.cuda.runtime.getDevice()
    outs, counters = _strides(out), _counters(tiles)
    plan = _forward_plan(device, q.dtype, q.shape, *strides, outs, shape, tiles, blocks, _NO_DROPOUT, counters)
    plan(q.data.ptr, k.data.ptr, v.data.ptr, out.data.ptr, lse.data.ptr)


def flash_attention(q, k, v, state=None, *, scale, causal, window, dropout_p=0.0, stream=0):
    B, H, T, D = q.shape
    shape, dtype = q.shape, q.dtype
    out_memory, lse_memory = L.scratch(q.size * q.itemsize), L.scratch(B * H * T * 4)  # (arrays: after the launch)
    if q.size:
        (q, qs), (k, ks), (v, vs) = _rows(q), _rows(k), _rows(v)
        tiles, drop = None, _NO_DROPOUT
        if hopper(q.dtype, D, dropout_p):
            tiles = HOPPER_TILES["fwd"][D]
        elif dropout_p:
            state = L.contiguous(state)  # (held until the launch below)
            drop = _dropout_args(state, dropout_p, stream)
        device, outs = cp.cuda.runtime.getDevice(), _seq_major_strides(shape)[:3]
        shape_args, counters = _shape_args(q, k, scale, causal, window), _counters(tiles)
        plan = _forward_plan(device, dtype, shape, qs, ks, vs, outs, shape_args, tiles, None, drop, counters)
        plan(q.data.ptr, k.data.ptr, v.data.ptr, out_memory.ptr, lse_memory.ptr)
    return _seq_major(shape, dtype, out_memory), cp.ndarray((B, H, T), np.float32, lse_memory)


# A backward launch's pointers, by name: each launch of a plan reads its own from this tuple.
_POINTERS = ("q", "k", "v", "g", "lse", "dvec", "dq", "dk", "dv", "dq_acc", "dk_acc", "dv_acc", "out")
_DOT = ("out", "g", "dvec", "dq_acc")
_INPUTS = ("q", "k", "v", "g", "lse", "dvec")


def _pointers(*names):
    return operator.itemgetter(*(_POINTERS.index(n) for n in names))


# The query heads' columns (G x head dim) above which the warp-specialised fused backward gives each
# query head a block of its own (kv_parts).
KV_SWEEP_COLUMNS = 512


def kv_parts(G: int, D: int) -> int:
    """How many blocks of the warp-specialised fused backward share a key tile's sweep over the G query
    heads that read its key/value head, adding dk and dv up in float32: G (a block per query head, as
    multi-head attention's) where G x D exceeds KV_SWEEP_COLUMNS, else 1 (one block sweeps all G).
    Longer sweeps outgrew L2 (G 8 at head dim 128: 18-26% slower on an H100); shorter ones lose more to
    the float32 sums than they gain (docs/cuda.md; bench/gqa_split.py, BENCHMARK.md)."""
    return G if G * D > KV_SWEEP_COLUMNS else 1


@functools.lru_cache(maxsize=256)
def _backward_plan(device, dtype, shape, kv_shape, qs, ks, vs, gs, outs, dqs, dks, shape_args, tiles, drop, parts):
    """The backward's launches for these shapes and layouts: (bytes of dvec, bytes of dQ's float32 sums,
    bytes of dK's and of dV's (each), ((name, pointers (a getter of _POINTERS' values), packed.Launch) in
    launch order)). tiles: the wgmma variants of dq and dk/dv, or None for the mma.sync kernels (with
    `drop`, _dropout_args); parts: as backward_launches'."""
    B, H, T, D = shape
    Hkv, S = kv_shape[1], kv_shape[2]
    fused = tiles is not None and tiles[0] in (FUSED, FUSED_OVERLAP)
    if not (fused and tiles[1][2:] == (WARP_SPECIALIZED,)):
        parts = 1  # (only hopper_bwd_ws splits its sweeps)
    elif parts is None:
        parts = kv_parts(H // Hkv, D)
    elif (H // Hkv) % parts:
        raise ValueError(f"flash attention: {parts} parts do not divide the {H // Hkv} query heads of a key/value head")
    rows = B * H * T
    # dvec (B, H, T), and for the fused kernels dQ's sums (B, H, T rounded up to 64, D) after it, then
    # dK's and dV's where key tiles are shared (B, Hkv, S rounded up to 64, D each), 256-byte aligned:
    # one allocation
    dvec_bytes = -(-rows * 4 // 256) * 256
    acc_bytes = B * H * -(-T // 64) * 64 * D * 4 if fused else 0
    kv_acc_bytes = B * Hkv * -(-S // 64) * 64 * D * 4 if parts > 1 else 0
    strides = (*qs, *ks, *vs, *gs)
    # (the dot kernel clears the float32 sums as it goes: one launch)
    dot_fixed = (*outs, *gs, H, T, D, rows, (acc_bytes + 2 * kv_acc_bytes) // 16)
    dot = _prepare(FILE, f"flash_bwd_dot_{L.suffix(dtype)}", (-(-rows * 8 // 256),), 256, 0, DOT_TYPES, dot_fixed)
    launches = [("dot", _pointers(*_DOT), dot)]
    dq_fixed, dkdv_fixed = (*strides, *dqs, *shape_args), (*strides, *dks, *shape_args)
    if fused:
        fused_launches = _fused_launches(dtype, shape, kv_shape, dqs, dks, dkdv_fixed, shape_args, tiles, parts)
        return dvec_bytes, acc_bytes, kv_acc_bytes, tuple(launches + fused_launches)
    if tiles is not None:
        (n, wq), (m, wk) = tiles
        suffix = L.suffix(dtype)
        # dq: queries and output gradients, two stages of keys and values; dk/dv: keys and values, two
        # stages of queries and output gradients and of their lse and dvec; 1 KB of alignment slack each
        dq_shared = (2 * 64 * wq + 4 * n) * D * 2 + 1024
        dkdv_shared = (2 * 64 * wk + 4 * m) * D * 2 + 2 * 2 * m * 4 + 1024
        name_dq, name_dkdv = f"hopper_bwd_dq_{suffix}_d{D}_n{n}_w{wq}", f"hopper_bwd_dkdv_{suffix}_d{D}_m{m}_w{wk}"
        dq_grid, dkdv_grid = (-(-T // (64 * wq)), B * H), (-(-S // (64 * wk)), B * Hkv)
        dq = _prepare(HOPPER_BWD_FILE, name_dq, dq_grid, WARPGROUP * wq, dq_shared, DQ_TYPES, dq_fixed)
        dkdv = _prepare(HOPPER_BWD_FILE, name_dkdv, dkdv_grid, WARPGROUP * wk, dkdv_shared, DKDV_TYPES, dkdv_fixed)
    else:  # dq double-buffers its key/value tiles, dk/dv its query/output-gradient tiles (and lse, dvec)
        block_n = 64 if D <= 96 else 32  # keys per tile of the dq kernel
        block_m = 64 if D <= 64 else 32  # queries per tile of the dk/dv kernel
        row_bytes = (D + _PAD) * 2
        dq_shared = max(2 * 64, 2 * 2 * block_n) * row_bytes  # staging of q/dO, then two key/value buffers
        dkdv_shared = (2 * 64 + 2 * 2 * block_m) * row_bytes + 2 * 2 * block_m * 4
        dropout = drop[2] > 0
        dq_name, dkdv_name = _name("bwd_dq", dtype, D, dropout), _name("bwd_dkdv", dtype, D, dropout)
        dq_grid, dkdv_grid = (-(-T // 64), B * H), (-(-S // 64), B * Hkv)
        dq = _prepare(FILE, dq_name, dq_grid, THREADS, dq_shared, DQ_TYPES + _DROP, (*dq_fixed, *drop))
        dkdv = _prepare(FILE, dkdv_name, dkdv_grid, THREADS, dkdv_shared, DKDV_TYPES + _DROP, (*dkdv_fixed, *drop))
    launches += [("dq", _pointers(*_INPUTS, "dq"), dq), ("dkdv", _pointers(*_INPUTS, "dk", "dv"), dkdv)]
    return dvec_bytes, acc_bytes, 0, tuple(launches)


def _fused_launches(dtype, shape, kv_shape, dqs, dks, dkdv_fixed, shape_args, tiles, parts) -> list:
    """flash_hopper_bwd.cu's fused backward: dk/dv and dQ's float32 partial sums (added into dq_acc,
    (B, H, T rounded up to 64, D), by every key block), then dq = scale * dq_acc by the convert kernel;
    with `parts` > 1 (hopper_bwd_ws only) dk and dv are summed the same way (dk_acc, dv_acc) and
    converted after dq."""
    B, H, T, D = shape
    Hkv, S = kv_shape[1], kv_shape[2]
    suffix = L.suffix(dtype)
    # dk/dv's (64, warpgroups[, blocks an SM the registers are capped for[, stages of query tiles]]), or
    # (queries a step, consumer warpgroups, WARP_SPECIALIZED)
    variant, (queries, wgs, *rest) = tiles
    keys = 64 * wgs  # a block's
    if rest == [WARP_SPECIALIZED]:  # hopper_bwd_ws: a producer warpgroup beside the consumers
        stages, threads = WS_BWD_STAGES, WARPGROUP * (wgs + 1)
        # keys and values, the stages of queries and output gradients, two dS^T buffers, the dQ tile,
        # the stages of lse and dvec
        shared = (2 * keys + 2 * stages * queries) * D * 2 + 2 * keys * queries * 2 + queries * D * 4
        shared += stages * 2 * queries * 4 + 1024
        name = f"hopper_bwd_{variant}_{suffix}_d{D}_m{queries}_c{wgs}_ws"
        grid = (-(-S // keys), B * Hkv * parts)
        dkdv = _prepare(HOPPER_BWD_FILE, name, grid, threads, shared, WS_BWD_TYPES, (*dkdv_fixed, parts))
        dkdv_pointers = _pointers(*_INPUTS, "dk", "dv", "dq_acc", "dk_acc")
    else:
        blocks, stages = (rest[0] if rest else None), (rest[1] if len(rest) > 1 else 2)
        threads = WARPGROUP * wgs
        # keys and values, the stages of queries and output gradients, dS^T, the stages of lse and dvec
        shared = (2 * keys + 2 * stages * 64) * D * 2 + keys * 64 * 2 + stages * 2 * 64 * 4 + 1024
        tail = (f"_b{blocks}" if blocks else "") + (f"_s{stages}" if stages != 2 else "")
        name = f"hopper_bwd_{variant}_{suffix}_d{D}_m64_w{wgs}{tail}"
        dkdv = _prepare(HOPPER_BWD_FILE, name, (-(-S // keys), B * Hkv), threads, shared, FUSED_TYPES, dkdv_fixed)
        dkdv_pointers = _pointers(*_INPUTS, "dk", "dv", "dq_acc")
    convert_name, scale = f"hopper_bwd_dq_convert_{suffix}_d{D}", shape_args[4]
    dq_grid = (-(-T // 64), B * H)
    convert = _prepare(HOPPER_BWD_FILE, convert_name, dq_grid, WARPGROUP, 0, CONVERT_TYPES, (*dqs, H, T, scale))
    # (dq only converts dQ's sums, after dk/dv has added them up)
    launches = [("dkdv", dkdv_pointers, dkdv), ("dq", _pointers("dq_acc", "dq"), convert)]
    if parts > 1:
        kv_grid = (-(-S // 64), B * Hkv)
        for grad, factor in (("dk", scale), ("dv", 1.0)):
            kv = _prepare(HOPPER_BWD_FILE, convert_name, kv_grid, WARPGROUP, 0, CONVERT_TYPES, (*dks, Hkv, S, factor))
            launches.append((grad, _pointers(f"{grad}_acc", grad), kv))
    return launches


def _backward(q, k, v, out, lse, g, dq, dk, dv, dqs, dks, scale, causal, window, dropout, tiles, parts=None):
    """The backward's launches as (name, packed.Launch, its pointers), in order, and what they point into
    that nothing else may hold (the row-layout copies _rows made, the scratch memory): alive until the
    launches are queued. dq, dk, dv: the gradients' pointers; dqs, dks: the element strides of dq and of
    dk and dv (one layout) over their first three axes; dropout: _dropout_args (None: none); tiles and
    parts as backward_launches'."""
    D = q.shape[3]
    (q, qs), (k, ks), (v, vs), (g, gs), (out, outs) = _rows(q), _rows(k), _rows(v), _rows(g), _rows(out)
    lse = L.contiguous(lse)
    drop = dropout or _NO_DROPOUT
    if tiles is None and os.environ.get("GRADCRAFT_DETERMINISTIC", "0") != "0":
        tiles = DETERMINISTIC_TILES.get(D)
    tiles = tuple(tiles or (HOPPER_TILES["dq"].get(D), HOPPER_TILES["dkdv"].get(D)))
    if drop[2] > 0 or None in tiles or not hopper(q.dtype, D):
        tiles = None  # the mma.sync kernels
    shape = _shape_args(q, k, scale, causal, window)
    device = cp.cuda.runtime.getDevice()
    dvec_bytes, acc_bytes, kv_acc_bytes, launches = _backward_plan(
        device, q.dtype, q.shape, k.shape, qs, ks, vs, gs, outs, dqs, dks, shape, tiles, drop, parts
    )
    memory = L.scratch(dvec_bytes + acc_bytes + 2 * kv_acc_bytes)
    dvec = memory.ptr
    dq_acc = dvec + dvec_bytes if acc_bytes else 0
    dk_acc = dq_acc + acc_bytes if kv_acc_bytes else 0
    dv_acc = dk_acc + kv_acc_bytes if kv_acc_bytes else 0
    inputs = (q.data.ptr, k.data.ptr, v.data.ptr, g.data.ptr, lse.data.ptr, dvec)
    pointers = (*inputs, dq, dk, dv, dq_acc, dk_acc, dv_acc, out.data.ptr)  # (as _POINTERS)
    return [(name, launch, getter(pointers)) for name, getter, launch in launches], (memory, q, k, v, g, out, lse)


def flash_attention_backward(q, k, v, out, lse, g, state=None, *, scale, causal, window, dropout_p=0.0, stream=0):
    memory = [L.scratch(a.size * a.itemsize) for a in (q, k, v)]  # dq, dk, dv's (arrays: after the launches)
    if q.size and k.size:
        state = L.contiguous(state) if dropout_p else None  # (held until the launches below)
        dropout = _dropout_args(state, dropout_p, stream)
        dqs, dks = _seq_major_strides(q.shape)[:3], _seq_major_strides(k.shape)[:3]
        pointers = (memory[0].ptr, memory[1].ptr, memory[2].ptr)
        launches, _keep = _backward(q, k, v, out, lse, g, *pointers, dqs, dks, scale, causal, window, dropout, None)
        for _, launch, args in launches:
            launch(*args)
    grads = [_seq_major(a.shape, a.dtype, m) for a, m in zip((q, k, v), memory)]
    if not (q.size and k.size):  # nothing attends: every gradient is zero
        for a in grads:
            a.fill(0)
    return tuple(grads)


def _run(launch, pointers, keep) -> None:
    launch(*pointers)  # (keep: what the pointers point into, alive as long as this callable)


def backward_launches(
    q, k, v, out, lse, g, dq, dk, dv, scale, causal, window, dropout=None, tiles=None, parts=None
) -> dict:
    """The backward's kernels as callables, in order (bench/attention_kernels.py times each):
    dot: dvec = rowsum(dO * O), the softmax gradient's correction term; dq: a block per query tile;
    dkdv: a block per key tile, over the query tiles of every query head sharing its KV head. With
    dq's variant FUSED or FUSED_OVERLAP, dkdv adds dQ up in float32 too (zeroed by "dot") and "dq"
    only converts it; where the warp-specialised dkdv splits its sweeps (`parts` blocks a key tile, a
    divisor of the query heads a key/value head; kv_parts's choice by default), it adds dK and dV up the
    same way, and "dk" and "dv" convert them.
    `dropout`: _dropout_args (None: no dropout). Where `hopper` says so, dq and dk/dv are
    flash_hopper_bwd.cu's wgmma kernels (`tiles`: the variants of dq and of dk/dv, HOPPER_TILES by
    default, where None keeps the mma.sync kernels).
    (On mma.sync, adding dq up with scalar atomics inside the dk/dv kernel measured 4% slower than
    the separate dq kernel at gpt2-124m's shapes on an H200; on wgmma, with dS^T staged in shared
    memory and 16-byte vector reductions in the accumulator's register order, the fused kernel is
    the faster, most at long sequences: bench/attention_kernels.py times both.)"""
    if dk.strides != dv.strides:  # the dk/dv kernel writes both through one set of strides
        raise ValueError("flash attention: dk and dv must share a layout")
    pointers, strides = (dq.data.ptr, dk.data.ptr, dv.data.ptr), (_strides(dq), _strides(dk))
    launches, keep = _backward(q, k, v, out, lse, g, *pointers, *strides, scale, causal, window, dropout, tiles, parts)
    return {name: functools.partial(_run, launch, pointers, keep) for name, launch, pointers in launches}


KERNELS = {"flash_attention": flash_attention, "flash_attention_backward": flash_attention_backward}
