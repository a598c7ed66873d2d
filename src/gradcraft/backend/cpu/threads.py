"""Threads for the CPU backend's elementwise and row-wise kernels, and the block loops they run.

A NumPy ufunc runs on one core, but it lets go of the GIL while it loops, so Python threads can work
on different row blocks of a big array at the same time (PyTorch's elementwise kernels use every
core through OpenMP). `_parallel` cuts a range of rows into cache-sized blocks that the calling thread
and the pool's threads take in turn. BLAS calls never run inside a block: BLAS has threads of its
own, and two layers of threads on the same cores would fight. The blocks also keep each kernel's
temporaries in cache when it runs on one thread (the default, see `num_threads`).
"""

import concurrent.futures
import itertools
import os
import threading

import numpy as np

_HALF = {np.dtype(np.float16), np.dtype("bfloat16")}

# Elements: below this a kernel runs on the calling thread alone. Waking a thread costs ~30-50 us on a
# VM, and a kernel over a few hundred thousand elements is done in about that time: the `demo` step's
# RoPE and norms (262k elements) ran slower split, its SwiGLU (1.5M) 1.5x faster.
_PARALLEL_MIN = 1 << 20
_BLOCK = 1 << 15  # elements a piece works on at a time, so that its temporaries stay in L2 cache
_CE_BLOCK = 1 << 18  # cross-entropy's blocks: bigger, so that a long row (the vocabulary) costs few calls
_MAP_BLOCK = 1 << 17  # a single ufunc's blocks: no temporaries to keep in cache, so fewer, bigger calls

_num_threads = None
_executor = None
_executor_lock = threading.Lock()  # two Python threads may start kernels at once


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def num_threads() -> int:
    """Threads for the elementwise and row-wise kernels: GRADCRAFT_NUM_THREADS, else the cores this
    process may run on, at most OMP_NUM_THREADS or OPENBLAS_NUM_THREADS when set (`set_num_threads`
    and `gradcraft bench --threads` set it too).

    Only arrays of _PARALLEL_MIN elements or more are split, in blocks that the threads take in turn,
    so a thread that another process holds up does less of the work. (Before gradcraft stopped
    OpenBLAS's idle threads from spinning, see gradcraft/__init__.py, the default was one thread: the
    spinning threads took the cores the pool would use.)"""
    global _num_threads
    if _num_threads is None:
        try:
            _num_threads = int(os.environ.get("GRADCRAFT_NUM_THREADS") or 0)
        except ValueError:
            _num_threads = 0
        if _num_threads < 1:
            cores = usable_cores()
            for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
                value = os.environ.get(name, "")
                if value.isdigit() and int(value) > 0:
                    cores = min(cores, int(value))
            _num_threads = max(1, cores)
    return _num_threads


def set_num_threads(n: int | None) -> None:
    """Use n threads from now on (None: the default of `num_threads`)."""
    global _num_threads, _executor
    if _executor is not None:
        _executor.shutdown(wait=True)
    _num_threads, _executor = (max(1, int(n)) if n else None), None


def _forget_threads_after_fork() -> None:
    global _executor, _executor_lock
    _executor = None  # the child has none of the parent's threads
    _executor_lock = threading.Lock()  # nor a lock that one of them held


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_threads_after_fork)


def _parallel(fn, n: int, row_size: int = 1, block: int | None = None, threads: int | None = None) -> None:
    """Call fn(start, stop) on blocks of about `block` (default _BLOCK) elements covering range(n)
    rows of row_size elements. When the work is big enough, the calling thread and the pool's threads
    take the next block in turn until none is left: a thread slowed down by another process (BLAS's
    idle threads spin for a while after each call) does less of the work instead of holding up the
    rest. Blocks must write disjoint outputs; fn(a, b) is called exactly once per block. `threads`:
    how many threads at most (default `num_threads()`)."""
    global _executor
    count = threads or num_threads()
    step = max(1, (block or _BLOCK) // max(row_size, 1))
    n_blocks = -(-n // step)
    if n_blocks <= 1 or n * row_size < _PARALLEL_MIN or count == 1:
        for a in range(0, n, step):
            fn(a, min(a + step, n))
        return
    with _executor_lock:
        executor = _executor
        if executor is None or executor._max_workers < count - 1:
            # A smaller pool is replaced, not shut down: another Python thread may be submitting to it
            # right now (submit after shutdown raises). Its idle threads exit once it is collected.
            executor = _executor = concurrent.futures.ThreadPoolExecutor(count - 1, thread_name_prefix="gradcraft-cpu")
    counter = itertools.count()  # next() on it is atomic under the GIL

    def drain():
        for i in iter(counter.__next__, None):
            if i >= n_blocks:
                return
            fn(i * step, min((i + 1) * step, n))

    futures = [executor.submit(drain) for _ in range(min(count, n_blocks) - 1)]
    try:
        drain()
    finally:  # wait for every block even when ours failed: none may outlive the kernel
        for future in futures:
            future.result()


def _map(fn, out: np.ndarray, *args) -> np.ndarray:
    """fn(*args, out=out) for a NumPy ufunc with broadcasting, split over threads along the output's
    first axis (inputs of size 1 there are broadcast whole to every piece)."""
    if out.size < _PARALLEL_MIN or out.ndim == 0:
        fn(*args, out=out)
        return out
    arrays = [a for a in args if isinstance(a, np.ndarray)]
    if out.flags.c_contiguous and all(a.shape == out.shape and a.flags.c_contiguous for a in arrays):
        # one flat range: the same split for every shape
        flat_out, flat_args = out.reshape(-1), [a.reshape(-1) if isinstance(a, np.ndarray) else a for a in args]
        _parallel(
            lambda lo, hi: fn(*[a[lo:hi] if isinstance(a, np.ndarray) else a for a in flat_args], out=flat_out[lo:hi]),
            out.size,
            1,
            _MAP_BLOCK,
        )
        return out
    lead = [a.reshape((1,) * (out.ndim - a.ndim) + a.shape) if isinstance(a, np.ndarray) else a for a in args]

    def piece(lo, hi):
        fn(*[a[lo:hi] if isinstance(a, np.ndarray) and a.shape[0] != 1 else a for a in lead], out=out[lo:hi])

    _parallel(piece, out.shape[0], out.size // max(out.shape[0], 1), _MAP_BLOCK)
    return out


def _rowwise(fn, out: np.ndarray, *inputs, inner: int = 0) -> np.ndarray:
    """fn(out_block, *input_blocks) over blocks of rows (the first axis) of same-shape arrays, on
    several threads; a block keeps the last `inner` axes whole (softmax's rows: 1). fn may use
    temporaries: a block is small enough to keep them in cache."""
    views = [out, *inputs]
    while views[0].ndim > inner + 1 and views[0].shape[0] == 1:
        views = [v[0] for v in views]  # a leading axis of 1 would leave nothing to split
    if views[0].ndim <= inner:
        fn(*views)
        return out
    rows = views[0].shape[0]
    row_size = views[0].size // max(rows, 1)
    _parallel(lambda a, b: fn(*[v[a:b] for v in views]), rows, row_size)
    return out


def _into(out: np.ndarray, compute) -> None:
    """Store compute(o), which writes its result into the float32/float64 array o, in out: o is out
    itself unless out is half precision (then a float32 block that is rounded into out once)."""
    if out.dtype in _HALF:
        o = np.empty(out.shape, np.float32)
        compute(o)
        out[...] = o
    else:
        compute(out)
