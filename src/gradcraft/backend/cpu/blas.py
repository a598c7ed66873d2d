"""How many threads NumPy's BLAS uses, set through the OpenBLAS library NumPy loaded (no threadpoolctl).

Why the CPU backend cares: a multi-threaded BLAS call splits its product among threads that meet at
a barrier when it ends. On a small product (an attention head's 128 x 32 x 128, a few hundred
microseconds of work) the split saves little when the cores are idle, and when other processes use
the cores it costs a scheduler time slice each time one of the threads is not running: a training
step of many small products then slows down far more than the work it does (measured in
BENCHMARK.md). So the backend runs small products on one thread (`thread_policy`), and for bigger ones (the MLP,
the vocabulary projection) picks per size class whichever of one thread or the configured threads
has been faster lately (`_ThreadChooser`: idle cores give the big products all threads; under
contention, where a multi-threaded product waits for a descheduled thread, one thread wins).
GRADCRAFT_BLAS_POLICY=off turns that off.

    from gradcraft.backend.cpu import blas
    blas.threads()            # BLAS's threads now (None: not an OpenBLAS this module can reach)
    blas.set_threads(2)       # what threadpoolctl's threadpool_limits(2, "blas") does for OpenBLAS

Only OpenBLAS (NumPy's wheels ship it, as libscipy_openblas64_) is handled; with another BLAS these
functions do nothing and `threads()` is None.
"""

import collections
import contextlib
import ctypes
import functools
import os
import time

# Products of fewer multiply-adds than this run on one thread: below it, a second thread saved less
# than ~15% on an idle 2-core machine and cost several times the product under contention.
ONE_THREAD_BELOW = 1 << 22  # about 4 M multiply-adds, e.g. (128 x 256) @ (256 x 128)

# (set, get) function names of OpenBLAS builds: NumPy's scipy-openblas (64-bit ints), plain OpenBLAS
_NAMES = [
    ("scipy_openblas_set_num_threads64_", "scipy_openblas_get_num_threads64_"),
    ("openblas_set_num_threads64_", "openblas_get_num_threads64_"),
    ("openblas_set_num_threads", "openblas_get_num_threads"),
]


@functools.cache
def _functions():
    """(set, get, set_local or None) of the OpenBLAS that NumPy loaded, or None."""
    import numpy  # noqa: F401  (loads NumPy's BLAS)

    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "openblas" in line.lower() and ".so" in line}
    except OSError:
        return None
    for path in sorted(paths):
        try:
            lib = ctypes.CDLL(path, mode=getattr(os, "RTLD_NOLOAD", 0) | ctypes.RTLD_GLOBAL)
        except OSError:
            continue
        for set_name, get_name in _NAMES:
            if hasattr(lib, set_name) and hasattr(lib, get_name):
                setter, getter = getattr(lib, set_name), getattr(lib, get_name)
                setter.argtypes, setter.restype = [ctypes.c_int], None
                getter.argtypes, getter.restype = [], ctypes.c_int
                # OpenBLAS >= 0.3.27: a thread count for the calling thread only, returning the previous one
                local = getattr(lib, "openblas_set_num_threads_local", None)
                if local is not None:
                    local.argtypes, local.restype = [ctypes.c_int], ctypes.c_int
                return setter, getter, local
    return None


def threads() -> int | None:
    """BLAS's thread count, or None where it cannot be read."""
    functions = _functions()
    return None if functions is None else int(functions[1]())


def set_threads(n: int) -> None:
    """Use n BLAS threads from now on (all threads of the process)."""
    functions = _functions()
    if functions is not None:
        functions[0](max(1, int(n)))


@contextlib.contextmanager
def limit(n: int):
    """Within the block, at most n BLAS threads on this thread (others keep theirs where OpenBLAS
    has per-thread counts)."""
    functions = _functions()
    if functions is None or functions[2] is None:
        yield
        return
    previous = functions[2](max(1, int(n)))
    try:
        yield
    finally:
        functions[2](previous)


def _per_call_matmul(a, b, *rest) -> int:
    """Multiply-adds of one BLAS call of the CPU backend's matmul: (..., M, K) @ (K, N) is one call on
    (batch*M, K); two stacks are one call per matrix."""
    if a.ndim == 0 or b.ndim == 0:
        return 0
    k, n = a.shape[-1], (b.shape[-1] if b.ndim >= 2 else 1)
    m = a.size // max(k, 1) if b.ndim <= 2 else (a.shape[-2] if a.ndim >= 2 else 1)
    return m * k * n


def _per_call_attention(q, k, *args, **kwargs) -> int:
    """Multiply-adds of one head's q @ k^T: (T, D) by (D, S)."""
    return q.shape[-2] * q.shape[-1] * k.shape[-2]


def _per_call_attention_heads(q, k, *args, **kwargs) -> int:
    """Multiply-adds of q @ k^T over all heads: what a kernel that splits the heads among threads
    (native/sdpa.py) shares out."""
    return q.size * k.shape[-2]


class _ThreadChooser:
    """For products of one size class (a power of 2 of multiply-adds), which thread count has been
    faster lately: the median multiply-adds per second of each count's last RECENT calls, fed by the
    calls' own times. While one thread is faster, every EXPLORE-th call tries the others so that
    idle cores are noticed; while more threads are faster, every EXPLORE_ONE-th call tries one (rarely:
    a change of load shows in the chosen count's own calls, and one thread's speed hardly depends on
    it; each try costs a product at half speed on idle cores).
    On idle cores the configured threads win on big products; when another process holds a core,
    a multi-threaded call waits at its barrier for a descheduled thread (a 1 ms product took 7 ms
    at the median, BENCHMARK.md) and one thread wins.

    A median, not a moving average: on idle cores one call in a few is slowed by a stray interrupt
    or page fault, and a moving average let one or two such calls hand the class to one thread until
    the next try of the other count (measured on the `demo` step: a sixth of its big products on one
    thread, 4% slower). Under contention most multi-threaded calls are slow, and the median turns
    after RECENT // 2 + 1 of them."""

    EXPLORE = 16
    EXPLORE_ONE = 64
    RECENT = 5

    def __init__(self):
        self.rates = {}  # (size class, threads) -> the last RECENT multiply-adds per second
        self.calls = {}  # size class -> calls so far

    def _rate(self, size_class: int, threads: int) -> float | None:
        recent = self.rates.get((size_class, threads))
        return None if not recent else sorted(recent)[len(recent) // 2]

    def choose(self, size_class: int, many: int) -> int:
        calls = self.calls[size_class] = self.calls.get(size_class, 0) + 1
        one, all_ = self._rate(size_class, 1), self._rate(size_class, many)
        if one is None or all_ is None:
            return 1 if one is None else many
        if all_ >= one:
            return 1 if calls % self.EXPLORE_ONE == 0 else many
        return many if calls % self.EXPLORE == 0 else 1

    def record(self, size_class: int, threads: int, macs: int, seconds: float) -> None:
        recent = self.rates.setdefault((size_class, threads), collections.deque(maxlen=self.RECENT))
        recent.append(macs / max(seconds, 1e-9))


_chooser = _ThreadChooser()


def _below_threshold_on_one_thread(fn, per_call):
    set_local = _functions()[2]

    @functools.wraps(fn)
    def kernel(*args, **kwargs):
        macs = per_call(*args)
        if macs < ONE_THREAD_BELOW:
            previous = set_local(1)
            try:
                return fn(*args, **kwargs)
            finally:
                set_local(previous)
        many = threads() or 1
        if many == 1:
            return fn(*args, **kwargs)
        size_class = macs.bit_length()
        chosen = _chooser.choose(size_class, many)
        previous = set_local(chosen)
        try:
            start = time.perf_counter()
            result = fn(*args, **kwargs)
            _chooser.record(size_class, chosen, macs, time.perf_counter() - start)
            return result
        finally:
            set_local(previous)

    return kernel


_policy_matmul = None


def _matmul_into(a, b, out):
    import numpy

    return numpy.matmul(a, b, out=out)


def matmul_into(a, b, out):
    """np.matmul(a, b, out=out) on the thread count the policy picks for its size: for kernels that run
    BLAS products of their own (the native fused output layer + loss)."""
    global _policy_matmul
    if _policy_matmul is None:
        functions = _functions()
        usable = functions is not None and functions[2] is not None and os.environ.get("GRADCRAFT_BLAS_POLICY") != "off"
        _policy_matmul = _below_threshold_on_one_thread(_matmul_into, _per_call_matmul) if usable else _matmul_into
    return _policy_matmul(a, b, out)


ATTENTION_KERNELS = ("sdpa", "sdpa_backward", "flash_attention", "flash_attention_backward")


def thread_policy(kernels: dict) -> dict:
    """The CPU backend's BLAS-heavy kernels (matmul, attention), wrapped so that their small products
    run on one thread: {name: kernel} to update the backend's table with ({} where OpenBLAS has no
    per-thread count, or GRADCRAFT_BLAS_POLICY=off)."""
    functions = _functions()
    if functions is None or functions[2] is None or os.environ.get("GRADCRAFT_BLAS_POLICY") == "off":
        return {}
    wrapped = {"matmul": _below_threshold_on_one_thread(kernels["matmul"], _per_call_matmul)}
    for name in ATTENTION_KERNELS:
        if name in kernels:
            over_heads = getattr(kernels[name], "threads_over_heads", False)
            per_call = _per_call_attention_heads if over_heads else _per_call_attention
            wrapped[name] = _below_threshold_on_one_thread(kernels[name], per_call)
    return wrapped
