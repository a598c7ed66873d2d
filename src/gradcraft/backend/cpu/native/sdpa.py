"""The C attention kernels (sdpa.c) as entries of the CPU kernel table: `sdpa` and its gradient for
float32 without an explicit mask, handing every other case to the NumPy kernels of
backend/cpu/sdpa.py (their reference)."""

import numpy as np

from gradcraft.backend.cpu import blas
from gradcraft.backend.cpu.native.common import _over_rows

_F32 = np.dtype(np.float32)


def _row_major(a):
    """a itself when its last axis is contiguous (the kernels take any other strides), else a copy."""
    return a if a.strides[-1] == a.itemsize and all(s % a.itemsize == 0 for s in a.strides) else np.ascontiguousarray(a)


def _strides(*arrays):
    """The (batch, head, row) strides of each array, in elements, as the kernels take them."""
    return np.array([s // a.itemsize for a in arrays for s in a.strides[:3]], np.int64)


def _fits(q, k, v, *rest, causal) -> bool:
    """Float32 (any layout: see _row_major), and every query sees at least one key
    (the kernels' rows are never empty; causal attention with fewer keys than queries leaves the first
    queries none)."""
    arrays = (q, k, v, *rest)
    if not all(a.dtype == _F32 and a.ndim == 4 for a in arrays):
        return False
    B, H, T, D = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    same_keys = k.shape[0] == B and k.shape[3] == D and v.shape[:3] == k.shape[:3]
    return same_keys and min(T, S, D, v.shape[3]) > 0 and H % Hkv == 0 and not (causal and S < T)


def kernels(lib, reference: dict, empty) -> dict:
    def scratch(T, S, D, Dv):
        return np.empty(lib.sdpa_scratch_floats(T, S, D, Dv), _F32)

    def sdpa(q, k, v, mask=None, *, scale, causal, window):
        if mask is not None or not _fits(q, k, v, causal=causal):
            return reference["sdpa"](q, k, v, mask, scale=scale, causal=causal, window=window)
        B, H, T, D = q.shape
        Hkv, S, Dv = k.shape[1], k.shape[2], v.shape[-1]
        q, k, v = (_row_major(a) for a in (q, k, v))  # views of a fused qkv projection are taken as they are
        strides = _strides(q, k, v)
        out = empty((B, H, T, Dv), _F32)
        args = (Hkv, H // Hkv, T, S, D, Dv, scale, int(bool(causal)), int(window or 0))
        pointers = [a.ctypes.data for a in (q, k, v, strides, out)]

        def call(lo, hi):
            work = scratch(T, S, D, Dv)
            lib.sdpa_f32(*pointers, *args, work.ctypes.data, lo, hi)

        # as many threads as BLAS may use for this call: blas.py's policy sets that per call (one under contention)
        _over_rows(call, B * Hkv, (H // Hkv) * T * S * (D + Dv), threads=blas.threads())
        return out

    def sdpa_backward(q, k, v, g, mask=None, *, scale, causal, window):
        if mask is not None or not _fits(q, k, v, g, causal=causal) or g.shape != q.shape[:3] + v.shape[3:]:
            return reference["sdpa_backward"](q, k, v, g, mask, scale=scale, causal=causal, window=window)
        B, H, T, D = q.shape
        Hkv, S, Dv = k.shape[1], k.shape[2], v.shape[-1]
        q, k, v, g = (_row_major(a) for a in (q, k, v, g))
        strides = _strides(q, k, v, g)
        dq, dk, dv = empty(q.shape, _F32), empty(k.shape, _F32), empty(v.shape, _F32)
        args = (Hkv, H // Hkv, T, S, D, Dv, scale, int(bool(causal)), int(window or 0))
        pointers = [a.ctypes.data for a in (q, k, v, g, strides, dq, dk, dv)]

        def call(lo, hi):
            work = scratch(T, S, D, Dv)
            lib.sdpa_backward_f32(*pointers, *args, work.ctypes.data, lo, hi)

        _over_rows(call, B * Hkv, (H // Hkv) * T * S * (2 * D + 3 * Dv), threads=blas.threads())
        return dq, dk, dv

    # blas.thread_policy sets the threads of a whole call (all heads), not of one head's products
    sdpa.threads_over_heads = sdpa_backward.threads_over_heads = True
    return {"sdpa": sdpa, "sdpa_backward": sdpa_backward}
