"""Helpers shared by the native kernels' Python wrappers (this package's __init__ and its modules)."""

import numpy as np

from gradcraft.backend.cpu.threads import _PARALLEL_MIN, _parallel, num_threads

_F32 = np.dtype(np.float32)


def _ptr(a):
    return a.ctypes.data if a is not None else None


def _f32(*arrays) -> bool:
    """All given arrays (None allowed) are C-contiguous float32."""
    return all(a is None or (a.dtype == _F32 and a.flags.c_contiguous) for a in arrays)


def _over_rows(call, n: int, row_size: int, align: int = 1, threads: int | None = None) -> None:
    """call(lo, hi) over range(n) rows: once on this thread, or, when the pool is on and the work is
    big, on ranges (aligned to `align` rows) about a quarter of a thread's share, which the threads
    take in turn (one held up by another process does fewer). `threads`: how many at most (default
    `num_threads()`)."""
    count = threads or num_threads()
    if count == 1 or n * row_size < _PARALLEL_MIN or n < 2:
        call(0, n)
        return
    per = -(-n // (4 * count))  # rows per range, rounded up to a multiple of align
    per = -(-per // align) * align
    _parallel(call, n, row_size, block=per * row_size, threads=count)


def _check_targets(target, classes: int, ignore_index: int) -> None:
    """The C kernels index rows with the targets: one out of range would read or write outside them."""
    valid = target[target != ignore_index]
    if valid.size and (valid.min() < 0 or valid.max() >= classes):
        raise IndexError(
            f"cross_entropy: target {int(valid.max() if valid.max() >= classes else valid.min())} "
            f"is out of range for {classes} classes"
        )
