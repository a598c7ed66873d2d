"""Creation kernels: full, arange, random tensors (kernels/random.cu), assign. (copy_from is the
backend's own method: it needs the device index.)"""

import cupy as cp

import numpy as np

from gradcraft.backend.cuda import launch as L
from gradcraft.backend.cuda.kv_cache import write_at

HALF = L.HALF


def _full(shape, value, dtype):
    dtype = np.dtype(dtype)
    if dtype in HALF:
        return cp.full(shape, value, dtype=np.float32).astype(dtype)
    return cp.full(shape, value, dtype=dtype)


def _arange(start, stop, step, dtype, shape):
    # Computed on the device (a host array would be a copy that CUDA-graph capture cannot record):
    # start + i * step in int64 or float64, then cast, as backend/cpu/creation.py does.
    exact = np.int64 if all(isinstance(v, (int, np.integer)) for v in (start, stop, step)) else np.float64
    return cp.arange(start, stop, step, dtype=exact).astype(dtype, copy=False)


def _random(kind):
    def kernel(shape, seed, dtype):
        dtype = np.dtype(dtype)
        out = L.empty(shape, dtype)
        if out.size:
            L.run(
                "random.cu",
                f"{kind}_{L.suffix(dtype)}",
                L.grid_1d(out.size, 256, 4),  # 4 values a thread
                256,
                (out, L.i64(out.size), np.uint64(seed)),
            )
        return out

    return kernel


def _randint(shape, low, high, seed, dtype):
    out = L.empty(shape, np.int64)
    if out.size:
        L.run(
            "random.cu",
            "randint_i64",
            L.grid_1d(out.size, 256, 4),  # 4 values a thread
            256,
            (out, L.i64(out.size), np.uint64(seed), L.i64(low), L.i64(high)),
        )
    return out.astype(dtype, copy=False)


def _assign(target, value, index=None, dim=None):
    if index is not None:  # one step's keys or values into their KV-cache slots (kv_cache.py)
        return write_at(target, value, index, dim)
    target[...] = value if value.dtype == target.dtype else value.astype(target.dtype)
    return target


KERNELS = {
    "full": _full,
    "arange": _arange,
    "rand": _random("rand"),
    "randn": _random("randn"),
    "randint": _randint,
    "assign": _assign,
}
