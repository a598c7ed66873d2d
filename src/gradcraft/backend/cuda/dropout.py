"""Launchers for kernels/dropout.cu: dropout with Philox masks drawn on the device, and the explicit
attention path's dropout (the flash kernels' mask). backend/cpu/dropout.py is their reference."""

import cupy as cp
import numpy as np

from gradcraft.backend import philox
from gradcraft.backend.cuda import launch as L
from gradcraft.backend.cuda.launch import f64, i32, i64


def dropout(x, state=None, *, p, stream=0, seed=None):
    """state: the int64 device array [seed, counter] that the kernel reads (so a replayed graph sees the
    counter move); stream: this layer's place in the step. `seed=` without a state (kernel tests and
    benchmarks) means state [seed, 0]: a host-to-device copy, so never inside a captured step."""
    x = L.as_contiguous(x)
    if state is None:
        state = cp.asarray(np.array([seed, 0], dtype=np.uint64).view(np.int64))
    y = L.empty(x.shape, x.dtype)
    if x.size:
        state = L.as_contiguous(state, np.int64)
        args = (x, y, i64(x.size), state, np.uint64(stream), f64(p), f64(1.0 / (1.0 - p)))
        L.run("dropout.cu", f"dropout_{L.suffix(x.dtype)}", L.grid_1d(x.size, 256, 4), 256, args)  # 4 values a thread
    return y


def attention_dropout(x, state, *, p, stream, T, S, i0=0, j0=0):
    """The explicit attention path's dropout: x (..., t, s) weights of queries i0.. and keys j0.. of a
    (B, H, T, S) attention, dropped with the flash kernels' mask (backend/philox.py) and scaled."""
    x = L.as_contiguous(x)
    y = L.empty(x.shape, x.dtype)
    if x.size:
        t, s = x.shape[-2], x.shape[-1]
        where = (i32(t), i32(s), i32(T), i32(S), i32(i0), i32(j0))  # the block's place in the attention
        mask = (L.as_contiguous(state, np.int64), np.uint32(stream), np.uint32(philox.threshold(p)))
        args = (x, y, i64(x.size), *where, *mask, np.float32(philox.keep_scale(p)))
        L.run("dropout.cu", f"attention_dropout_{L.suffix(x.dtype)}", L.grid_1d(x.size), 256, args)
    return y


KERNELS = {"dropout": dropout, "attention_dropout": attention_dropout}
