"""Creation kernels: full, arange, assign (random tensors: random.py). (copy_from is the backend's own
method: it needs the device index.)"""

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


def _assign(target, value, index=None, dim=None):
    if index is not None:  # one step's keys or values into their KV-cache slots (kv_cache.py)
        return write_at(target, value, index, dim)
    target[...] = value if value.dtype == target.dtype else value.astype(target.dtype)
    return target


KERNELS = {"full": _full, "arange": _arange, "assign": _assign}
