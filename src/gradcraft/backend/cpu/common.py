"""What every CPU kernel family shares: the pooled output buffers and the half-precision rule.

float16 and bfloat16 arithmetic runs in float32 and rounds once at the end, as GPUs do; NumPy's own
half-precision loops are slow and round every step. Outputs come from the CPU pool
(backend/memory.py), which recycles freed arrays of the same size.
"""

import numpy as np

from gradcraft.backend.memory import CPUPool, stats

_pool = CPUPool(stats)


_HALF = {np.dtype(np.float16), np.dtype("bfloat16")}


def _wide(a: np.ndarray) -> np.ndarray:
    """float32 view of the computation for half-precision inputs."""
    return a.astype(np.float32) if a.dtype in _HALF else a


def _out(shape, dtype) -> np.ndarray:
    return _pool.empty(shape, dtype)


def _finish(result: np.ndarray, dtype) -> np.ndarray:
    """Cast a float32 result back to a half dtype, into a pooled buffer."""
    result = np.asarray(result)
    if result.dtype == dtype:
        return stats.track(result) if result.base is None else result
    out = _out(result.shape, dtype)
    out[...] = result
    return out


def _last_axis_rows(*arrays):
    """Views (rows, last axis) of C-contiguous arrays, so that blocks hold whole rows of any rank;
    other layouts stay as they are (the blocks then follow their first axis)."""
    if all(a.ndim >= 2 and a.flags.c_contiguous for a in arrays):
        return [a.reshape(-1, a.shape[-1]) for a in arrays]
    return list(arrays)
