"""Movement kernels (views where the layout allows); gathers and their scatter-add gradients are gather.py's."""

import cupy as cp

import numpy as np

from gradcraft.backend.cuda import launch as L

HALF = L.HALF


def _slice(a, slices):
    return a[tuple(slice(*s) for s in slices)]


def _pad(a, pads, value):
    out = (
        cp.full(tuple(n + lo + hi for n, (lo, hi) in zip(a.shape, pads)), value, dtype=a.dtype)
        if a.dtype not in HALF
        else cp.full(tuple(n + lo + hi for n, (lo, hi) in zip(a.shape, pads)), value, dtype=np.float32).astype(a.dtype)
    )
    out[tuple(slice(lo, lo + n) for n, (lo, _) in zip(a.shape, pads))] = a
    return out


def _triangle(fn):
    def kernel(a, diagonal):
        rows, cols = a.shape[-2:]
        keep = fn(cp.ones((rows, cols), dtype=np.bool_), diagonal)
        if a.dtype in HALF:
            return cp.where(keep, a.view(np.uint16), np.uint16(0)).view(a.dtype)
        return cp.where(keep, a, cp.zeros((), dtype=a.dtype))

    return kernel


KERNELS = {
    "reshape": lambda a, shape: cp.reshape(a, shape),
    "passthrough": lambda a, *others, **attrs: a[...],  # (a view: the others and attrs are the op layer's)
    "permute": lambda a, axes: cp.transpose(a, axes),
    "expand": lambda a, shape: cp.broadcast_to(a, shape),
    "slice": _slice,
    "flip": lambda a, axes: cp.flip(a, axes),
    "contiguous": lambda a: cp.array(a, copy=True, order="C"),
    "cat": lambda *arrays, axis: cp.concatenate(arrays, axis=axis),
    "pad": _pad,
    "tril": _triangle(cp.tril),
    "triu": _triangle(cp.triu),
}
