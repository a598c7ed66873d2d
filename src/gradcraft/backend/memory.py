"""Counts of device bytes in use, and a pool that recycles freed CPU arrays.

Every buffer a kernel allocates is registered here: `live_bytes` goes up when it
is handed out and down when it is freed (returned to the pool, or garbage
collected). `peak_bytes` is the high-water mark since the last reset. Views do
not allocate and are not counted.

The pool keeps freed arrays by (dtype, byte size) and hands them back to
kernels that ask for an output of that size, so a steady training loop stops
calling the system allocator.
"""

import math
import weakref
from collections import defaultdict

import numpy as np


class MemoryStats:
    def __init__(self):
        self.live_bytes = 0
        self.peak_bytes = 0
        self.allocations = 0  # buffers handed out (fresh or recycled)
        self.fresh_allocations = 0  # of those, the ones the pool could not serve
        self._in_use: dict[int, int] = {}  # id(array) -> bytes, for arrays handed out and not yet freed

    def _take(self, array: np.ndarray, fresh: bool) -> None:
        self._in_use[id(array)] = array.nbytes
        self.live_bytes += array.nbytes
        self.peak_bytes = max(self.peak_bytes, self.live_bytes)
        self.allocations += 1
        self.fresh_allocations += fresh

    def _release(self, key: int) -> None:
        self.live_bytes -= self._in_use.pop(key, 0)

    def track(self, array: np.ndarray) -> np.ndarray:
        """Count an array a kernel allocated itself (no-op for views and known arrays)."""
        if array.base is None and id(array) not in self._in_use and array.nbytes:
            self._take(array, fresh=True)
            weakref.finalize(array, self._release, id(array))
        return array

    def reset_peak(self) -> None:
        self.peak_bytes = self.live_bytes

    def as_dict(self) -> dict:
        return {
            "live_bytes": self.live_bytes,
            "peak_bytes": self.peak_bytes,
            "allocations": self.allocations,
            "fresh_allocations": self.fresh_allocations,
        }


class CPUPool:
    """Free lists of NumPy arrays keyed by (dtype, nbytes), capped in total size."""

    def __init__(self, stats: MemoryStats, limit_bytes: int = 1 << 30):
        self.stats = stats
        self.limit_bytes = limit_bytes
        self.pooled_bytes = 0
        self._free: dict[tuple, list[np.ndarray]] = defaultdict(list)

    def empty(self, shape, dtype) -> np.ndarray:
        dtype = np.dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize  # (math.prod: np.prod costs ~3 us a call)
        bucket = self._free.get((dtype, nbytes))
        if bucket:
            flat = bucket.pop()
            self.pooled_bytes -= nbytes
            array = flat.reshape(shape)  # a view of the pooled base array
            self.stats._take(flat, fresh=False)
            return array
        flat = np.empty(nbytes // dtype.itemsize, dtype=dtype)
        self.stats._take(flat, fresh=True)
        weakref.finalize(flat, self.stats._release, id(flat))
        return flat.reshape(shape)

    def recycle(self, array: np.ndarray) -> bool:
        """Take back an array nobody else references. Returns whether it was pooled."""
        base = array if array.base is None else array.base
        if not isinstance(base, np.ndarray) or base.ndim != 1 or id(base) not in self.stats._in_use:
            return False
        if self.pooled_bytes + base.nbytes > self.limit_bytes:
            return False
        self.stats._release(id(base))
        self._free[(base.dtype, base.nbytes)].append(base)
        self.pooled_bytes += base.nbytes
        return True

    def clear(self) -> None:
        self._free.clear()
        self.pooled_bytes = 0


stats = MemoryStats()
