"""Gathers and their scatter-add gradients: indexing, take_along_dim, and the gradient of slicing
(backend/cpu/gather.py is their reference)."""

import cupy as cp

import numpy as np

from gradcraft.backend import slices_tile_one_axis
from gradcraft.backend.cuda import launch as L

HALF = L.HALF


def _index_tuple(indices, spec):
    return tuple(indices[item] if isinstance(item, int) else slice(*item) for item in spec)


def _index(a, *indices, spec):
    return L.contiguous(a[_index_tuple(indices, spec)])


def _index_put_add(g, *indices, spec, shape):
    w = L.wide(g)
    out = cp.zeros(shape, dtype=w.dtype)
    cp.add.at(out, _index_tuple(indices, spec), w)
    return L.finish(out, g.dtype)


def _copy_rows(dst, src) -> bool:
    """dst[...] = src, 16 bytes at a time, for a contiguous src and a dst whose rows (last axis) are
    contiguous and evenly spaced (a slice of a wider array along its last axis, as the q/k/v
    gradients are of the qkv projection's); False, copying nothing, for any other layout."""
    if dst.ndim == 0 or dst.shape != src.shape or dst.dtype != src.dtype or not src.flags.c_contiguous:
        return False
    item, width = dst.itemsize, dst.shape[-1] * dst.itemsize
    if (
        dst.strides[-1] != item
        or width % 16
        or any(dst.strides[i] != dst.shape[i + 1] * dst.strides[i + 1] for i in range(dst.ndim - 2))
    ):
        return False
    row_stride = dst.strides[-2] if dst.ndim > 1 else width
    if row_stride % 16 or dst.data.ptr % 16 or src.data.ptr % 16:
        return False
    rows = dst.size // dst.shape[-1]
    if rows:
        L.run(
            "elementwise.cu",
            "copy_rows_16",
            L.grid_1d(rows * (width // 16)),
            256,
            (src, dst, L.i64(rows), L.i64(width // 16), L.i64(row_stride // 16)),
        )
    return True


def _put_slices(*gs, specs, shape):
    """Zeros of `shape` with each g added at its slices (backend/cpu/gather.py's _put_slices): plain slice writes,
    no atomics; no zero-fill when the slices tile the output along one axis."""
    if all(g.dtype == gs[0].dtype for g in gs) and slices_tile_one_axis(specs, shape):
        out = L.empty(shape, gs[0].dtype)  # plain copies: no arithmetic, so no widening
        for g, spec in zip(gs, specs):
            dst = out[tuple(slice(*s) for s in spec)]
            if not _copy_rows(dst, g):  # (CuPy's strided copy is ~5x slower than the rows one)
                dst[...] = g
        return out
    dtype = np.result_type(*[L.acc_dtype(g.dtype) if g.dtype in HALF else g.dtype for g in gs])
    if slices_tile_one_axis(specs, shape):
        out = cp.empty(shape, dtype=dtype)
        for g, spec in zip(gs, specs):
            out[tuple(slice(*s) for s in spec)] = g
    else:
        out = cp.zeros(shape, dtype=dtype)
        for g, spec in zip(gs, specs):
            out[tuple(slice(*s) for s in spec)] += L.wide(g)
    return L.finish(out, gs[0].dtype)


def _take_along_dim(a, idx, axis):
    return L.contiguous(cp.take_along_axis(a, idx, axis=axis))


def _scatter_add_along_dim(g, idx, axis, shape):
    w = L.wide(g)
    out = cp.zeros(shape, dtype=w.dtype)
    grids = list(cp.ix_(*[cp.arange(n) for n in idx.shape]))
    grids[axis] = idx
    cp.add.at(out, tuple(grids), w)
    return L.finish(out, g.dtype)


KERNELS = {
    "index": _index,
    "index_put_add": _index_put_add,
    "take_along_dim": _take_along_dim,
    "scatter_add_along_dim": _scatter_add_along_dim,
    "put_slices": _put_slices,
}
