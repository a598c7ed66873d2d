"""Movement kernels: views where the layout allows (reshape, permute, expand, slice, flip), copies
otherwise (contiguous, cat, pad, tril, triu)."""

import numpy as np

from gradcraft.backend.cpu.common import _out, stats


def _reshape(a, shape):
    return np.reshape(a, shape)


def _slice(a, slices):
    return a[tuple(slice(*s) for s in slices)]


def _contiguous(a):
    out = _out(a.shape, a.dtype)
    out[...] = a
    return out


def _cat(*arrays, axis):
    return stats.track(np.concatenate(arrays, axis=axis))


def _pad(a, pads, value):
    return stats.track(np.pad(a, pads, constant_values=value))


def _tril(a, diagonal):
    return stats.track(np.tril(a, diagonal))


def _triu(a, diagonal):
    return stats.track(np.triu(a, diagonal))


KERNELS = {
    "reshape": _reshape,
    "permute": lambda a, axes: np.transpose(a, axes),
    "expand": lambda a, shape: np.broadcast_to(a, shape),
    "slice": _slice,
    "flip": lambda a, axes: np.flip(a, axes),
    "contiguous": _contiguous,
    "cat": _cat,
    "pad": _pad,
    "tril": _tril,
    "triu": _triu,
    "passthrough": lambda a, *others, **attrs: a[...],  # (a view: the others and attrs are the op layer's)
}
