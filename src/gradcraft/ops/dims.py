"""Dimension arguments: negative dims wrapped, checked against the tensor's rank (shared by the
reductions and the movement ops, which build on each other only through this module)."""

import builtins

from gradcraft.errors import IndexError_


def normalize_dim(dim: int, ndim: int) -> int:
    size = builtins.max(ndim, 1)
    if not -size <= dim < size:
        raise IndexError_(f"dimension {dim} is out of range for a tensor with {ndim} dimensions")
    return dim % size


def normalize_axes(dim, ndim: int) -> tuple:
    if dim is None:
        return tuple(range(ndim))
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    return tuple(sorted({normalize_dim(d, ndim) for d in dims})) if ndim else ()
