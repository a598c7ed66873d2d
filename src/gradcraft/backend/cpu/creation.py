"""Creation kernels: full, arange, copies from another device, and assign (the one kernel that
writes into its first argument)."""

import numpy as np

from gradcraft.backend.cpu.common import _out, stats
from gradcraft.backend.cpu.kv_cache import write_at


def _full(shape, value, dtype):
    out = _out(shape, dtype)
    out.fill(value)
    return out


def _arange(start, stop, step, dtype, shape):
    return stats.track(np.arange(start, stop, step).astype(dtype))


def _copy_from(a, source_backend):
    return stats.track(np.array(source_backend.to_numpy(a), copy=True))


def _assign(target, value, index=None, dim=None):
    if index is not None:  # one step's keys or values into their KV-cache slots (kv_cache.py)
        return write_at(target, value, index, dim)
    target[...] = value
    return target


KERNELS = {"full": _full, "arange": _arange, "copy_from": _copy_from, "assign": _assign}
