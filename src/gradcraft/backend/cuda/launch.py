"""What every launcher shares: dtype names, output allocation (poisonable for tests), launch shapes."""

import collections
import contextlib
import functools
import math
from collections.abc import Iterator

import cupy as cp
import cupyx
import numpy as np

from gradcraft.backend.cuda import compiler

HALF = {np.dtype(np.float16), np.dtype("bfloat16")}
FLOAT = {
    np.dtype(np.float32): "f32",
    np.dtype(np.float64): "f64",
    np.dtype("bfloat16"): "bf16",
    np.dtype(np.float16): "f16",
}

# Tests set this: every output the handwritten kernels get is filled with NaN bits (0xFF bytes) first,
# so an element a kernel forgets to write shows up.
POISON = False


def empty(shape, dtype) -> cp.ndarray:
    out = cp.empty(shape, dtype=dtype)
    if POISON and out.nbytes:
        out.reshape(-1).view(np.uint8).fill(0xFF)
    return out


def contiguous(a: cp.ndarray) -> cp.ndarray:
    """C-contiguous a (as is when it already is; cp.ascontiguousarray would turn 0-d into 1-d)."""
    return a if a.flags.c_contiguous else cp.ascontiguousarray(a)


def acc_dtype(dtype) -> np.dtype:
    """The kernels' accumulator type for a storage dtype: float64 for float64, float32 otherwise."""
    return np.dtype(np.float64) if np.dtype(dtype) == np.float64 else np.dtype(np.float32)


def as_contiguous(a: cp.ndarray, dtype=None) -> cp.ndarray:
    """Contiguous, and of `dtype` when given (a gradient always arrives in its tensor's dtype from the
    engine; the cast only guards direct callers)."""
    if dtype is not None and a.dtype != dtype:
        a = a.astype(dtype)
    return contiguous(a)


def acc_param(a, like) -> cp.ndarray | None:
    """A small parameter (norm weight, rope table) in the kernels' accumulator type for `like`'s dtype."""
    return None if a is None else contiguous(a.astype(acc_dtype(like.dtype), copy=False)).reshape(-1)


def wide(a: cp.ndarray) -> cp.ndarray:
    """float32 for half-precision inputs: arithmetic happens there and rounds once (backend/cpu/common.py's rule)."""
    return a.astype(np.float32) if a.dtype in HALF else a


def finish(result: cp.ndarray, dtype) -> cp.ndarray:
    return result if result.dtype == dtype else result.astype(dtype)


def suffix(dtype) -> str:
    try:
        return FLOAT[np.dtype(dtype)]
    except KeyError:
        raise TypeError(f"no CUDA kernel for dtype {np.dtype(dtype)}") from None


def row_threads(width: int) -> int:
    """Threads for one block per row of `width` values: about 8 values a thread, 32..1024."""
    want = max(32, min(1024, 1 << max(0, math.ceil(math.log2(max(1, -(-width // 8)))))))
    return want


def aligned(*arrays, to: int = 16) -> bool:
    """Whether every array (None: skipped) starts at a multiple of `to` bytes: the vectorised kernels
    move 16 bytes per access (CuPy's allocations are 256-byte aligned; a view with an offset may not be)."""
    return all(a is None or a.data.ptr % to == 0 for a in arrays)


def access(dtype, *arrays, width=None) -> str:
    """ "v" where the kernels can move 16 bytes per access (every array 16-byte aligned, and `width`, when
    given, a multiple of the values per access), else "s"."""
    per_access = 16 // np.dtype(dtype).itemsize
    ok = (width is None or width % per_access == 0) and aligned(*arrays)
    return "v" if ok else "s"


@functools.cache
def _sm_count(device_id: int) -> int:
    return int(cp.cuda.Device(device_id).attributes["MultiProcessorCount"])  # (a dict of every attribute)


def sm_count() -> int:
    """Streaming multiprocessors of the current device (sizes the grids of kernels that keep per-block
    partial results)."""
    return _sm_count(cp.cuda.Device().id)


# Counters of finished blocks, for kernels whose last block to finish a row merges the others' partial
# results (kernels/kv_cache.cu's split attention, kernels/reduce.cu's split argmax), or of work handed
# out (flash_hopper.cu's persistent forward, whose blocks take query tiles by number): one int32 buffer
# per device, zeroed once when allocated and never again (each launch leaves its counters at 0: the
# last block sets its counter back), so a replayed CUDA graph needs no reset of its own. Launches that
# share the buffer must not run at the same time (they do not: a decoding step's kernels run one after
# another on one stream). Allocated generously up front (4 counters a multiprocessor, 2 KB on an H200):
# the kernels split only while their rows are fewer. Should a launch need more, a new buffer (at least
# twice as large) is taken and the old ones are kept: a captured CUDA graph holds the pointer it was
# captured with, and its replays must find that buffer alive (and at 0). The buffers come straight from
# cudaMalloc, not from CuPy's pool: one allocated during a capture must not belong to that graph's
# private pool, which goes with the graph.
_counters: dict[int, list] = {}  # device id -> its counter buffers (cupy Memory), newest last


def block_counters(count: int) -> np.uint64:
    """The device pointer of at least `count` int32 counters of the current device, at 0 between launches."""
    device = cp.cuda.Device().id
    buffers = _counters.setdefault(device, [])
    if not buffers or buffers[-1].size < 4 * count:
        size = max(4 * count, 4 * sm_count(), 2 * buffers[-1].size if buffers else 0)
        memory = cp.cuda.Memory(size)
        # Zeroed on a stream of its own and waited for: a memset on the current stream would be recorded
        # into a graph being captured (and rerun by every replay, resetting a counter in use).
        stream = cp.cuda.Stream(non_blocking=True)
        cp.cuda.runtime.memsetAsync(memory.ptr, 0, size, stream.ptr)
        stream.synchronize()
        buffers.append(memory)
    return np.uint64(buffers[-1].ptr)


def grid_1d(n: int, threads: int = 256, per_thread: int = 1) -> int:
    """Blocks for a grid-stride loop over n items: enough to fill the GPU, never more than needed."""
    return max(1, min(-(-n // (threads * per_thread)), 65535 * 8))


_constants: "collections.OrderedDict[tuple, tuple]" = collections.OrderedDict()
CACHED_CONSTANTS = 256
# While a CUDA graph is captured: the list of tables its kernels read, which the graph holds as long
# as it lives (its recorded copies read their pinned host memory at every replay).
_capturing: list = []
# Tables dropped from the cache, each with an event after its last use: kept until the device has
# passed that point (an asynchronous copy from freed pinned memory could read another table).
_retired: list = []


def constant(values, dtype) -> cp.ndarray:
    """A small device array holding `values` (pointer tables, sizes, dtype codes), cached.

    Copied from pinned host memory with an asynchronous copy on the current stream, which CUDA-graph
    capture can record (a copy from ordinary host memory cannot be captured). A graph keeps every
    table it read (`capture_tables`), so a replay always copies the same values, even once the cache
    has dropped them; a table dropped outside a capture is freed only after the device has passed
    its last use."""
    key = (tuple(int(v) for v in values), np.dtype(dtype).str)
    hit = _constants.get(key)
    if hit is None:
        host = cupyx.empty_pinned((len(key[0]),), dtype=dtype)
        host[:] = key[0]
        device = cp.empty(len(key[0]), dtype=dtype)
        # (ndarray.set refuses while a graph is being captured; the runtime call records a copy node)
        cp.cuda.runtime.memcpyAsync(
            device.data.ptr,
            host.ctypes.data,
            host.nbytes,
            cp.cuda.runtime.memcpyHostToDevice,
            cp.cuda.get_current_stream().ptr,
        )
        hit = _constants[key] = (host, device)
        _evict()
    else:
        _constants.move_to_end(key)
    if _capturing:
        _capturing[-1].append(hit)
    return hit[1]


def _evict() -> None:
    """Drop the least recently used tables beyond CACHED_CONSTANTS (tables of tensors that no longer
    exist, or a new output's pointers each call); never while a graph is captured."""
    if _capturing or len(_constants) <= CACHED_CONSTANTS:
        return
    _retired[:] = [(entry, event) for entry, event in _retired if not event.done]
    dropped = []
    while len(_constants) > CACHED_CONSTANTS * 3 // 4:  # a quarter at a time: one event per 64 tables
        dropped.append(_constants.popitem(last=False)[1])
    event = cp.cuda.Event(disable_timing=True)
    event.record(cp.cuda.get_current_stream())
    _retired.append((dropped, event))


@contextlib.contextmanager
def capture_tables() -> Iterator[list]:
    """Within: a graph is being captured; yields the list of the tables its kernels read, for the
    graph's owner to keep as long as the graph."""
    tables: list = []
    _capturing.append(tables)
    try:
        yield tables
    finally:
        _capturing.pop()


DEFAULT_SHARED = 48 * 1024  # shared memory a block may use without asking (fixed and dynamic together)
_shared_allowed: dict = {}  # (file, kernel, device) -> the dynamic shared memory its function may use


def with_shared(file: str, kernel: str, shared: int, fixed: int = 0):
    """The kernel of `file`, allowed `shared` bytes of dynamic shared memory beside its `fixed` bytes
    of static arrays. The allowance belongs to the function (one object whatever the launch asks),
    so it only ever grows: a smaller launch never takes away what a bigger one needs."""
    device_id = cp.cuda.Device().id
    fn = compiler.function(file, kernel, device_id)
    key = (file, kernel, device_id)
    if shared > _shared_allowed.get(key, DEFAULT_SHARED - fixed):
        fn.max_dynamic_shared_size_bytes = shared
        _shared_allowed[key] = shared
    return fn


def run(file: str, kernel: str, grid: int, block: int, args: tuple, shared_mem: int = 0) -> None:
    fn = compiler.function(file, kernel, cp.cuda.Device().id)
    fn((grid,), (block,), args, shared_mem=shared_mem)


def ptr(a) -> np.uint64:
    """A pointer argument; None is NULL."""
    return np.uint64(0 if a is None else a.data.ptr)


def i64(v) -> np.int64:
    return np.int64(v)


def i32(v) -> np.int32:
    return np.int32(v)


def f64(v) -> np.float64:
    return np.float64(v)


def scratch(nbytes: int) -> cp.cuda.MemoryPointer:
    """`nbytes` of device memory from CuPy's pool without an array object around it (a launcher's own
    temporaries, or the memory of an array it builds with cupy.ndarray: cheaper than cupy.empty); NaN
    bits (0xFF bytes) when POISON."""
    memory = cp.cuda.alloc(nbytes)
    if POISON and nbytes:
        cp.cuda.runtime.memsetAsync(memory.ptr, 0xFF, nbytes, cp.cuda.get_current_stream().ptr)
    return memory
