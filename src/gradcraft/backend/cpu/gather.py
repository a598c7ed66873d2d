"""Gathers and their scatter-add gradients: indexing, take_along_dim, and the gradient of slicing."""

import numpy as np

from gradcraft.backend import slices_tile_one_axis
from gradcraft.backend.cpu.common import _finish, _out, _wide, stats
from gradcraft.backend.cpu.threads import _MAP_BLOCK, _parallel


def _index_tuple(indices, spec):
    return tuple(indices[item] if isinstance(item, int) else slice(*item) for item in spec)


def _index(a, *indices, spec):
    return stats.track(np.ascontiguousarray(a[_index_tuple(indices, spec)]))


def _index_put_add(g, *indices, spec, shape):
    if not indices:
        return _put_slices(g, spec, shape)
    out = _out(shape, _wide(g).dtype)
    out.fill(0)
    np.add.at(out, _index_tuple(indices, spec), _wide(g))  # gathered positions may repeat: accumulate
    return _finish(out, g.dtype)


def _put_slices(g, spec, shape):
    """Zeros of `shape` with g written at the slices of spec (the gradient of slicing): writes the
    box and zero-fills only the rest, instead of zero-filling everything and then the box again."""
    out = _out(shape, g.dtype)
    slices = [slice(*item).indices(n) for item, n in zip(spec, shape)] + [(0, n, 1) for n in shape[len(spec) :]]
    if any(step != 1 for _, _, step in slices) or out.ndim == 0:
        out.fill(0)
        out[tuple(slice(*s) for s in slices)] = g
        return out

    def fill(lo, hi):  # rows lo:hi of the first axis, which the box covers whole when split
        view, box = out[lo:hi], [slice(*s) for s in slices]
        if hi - lo != shape[0]:
            box[0] = slice(0, hi - lo)
        for axis, s in enumerate(box):  # the complement of the box: below and above it on each axis
            start, stop = max(s.start, 0), max(s.stop, s.start)
            lead = tuple(box[:axis])
            if start > 0:
                view[lead + (slice(0, start),)] = 0
            if stop < view.shape[axis]:
                view[lead + (slice(stop, None),)] = 0
        view[tuple(box)] = g[lo:hi] if hi - lo != shape[0] else g

    if slices[0] == (0, shape[0], 1):
        _parallel(fill, shape[0], out.size // max(shape[0], 1), _MAP_BLOCK)
    else:
        fill(0, shape[0])
    return out


def _put_slices_many(*gs, specs, shape):
    """Zeros of `shape` with each g added at its slices: the gradients of several slices of one
    tensor (q/k/v out of one matmul) in one buffer, instead of one zero-filled buffer each, added."""
    if len(gs) == 1:
        return _put_slices(gs[0], specs[0], shape)
    dtype = np.result_type(*[_wide(g) for g in gs])
    out = _out(shape, dtype)
    if slices_tile_one_axis(specs, shape):
        for g, spec in zip(gs, specs):
            out[tuple(slice(*s) for s in spec)] = g
    else:
        out.fill(0)
        for g, spec in zip(gs, specs):
            out[tuple(slice(*s) for s in spec)] += _wide(g)
    return _finish(out, gs[0].dtype)


def _take_along_dim(a, idx, axis):
    return stats.track(np.take_along_axis(a, idx, axis=axis))


def _scatter_add_along_dim(g, idx, axis, shape):
    out = np.zeros(shape, dtype=_wide(g).dtype)
    # add.at with full open-mesh indices: take_along_axis's inverse, accumulating repeats.
    grids = list(np.ix_(*[np.arange(n) for n in idx.shape]))
    grids[axis] = idx
    np.add.at(out, tuple(grids), _wide(g))
    return _finish(out, g.dtype)


KERNELS = {
    "index": _index,
    "index_put_add": _index_put_add,
    "take_along_dim": _take_along_dim,
    "scatter_add_along_dim": _scatter_add_along_dim,
    "put_slices": _put_slices_many,
}
