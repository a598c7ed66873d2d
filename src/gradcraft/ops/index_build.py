"""Ops that build coordinates or counts: meshgrid, nonzero, argwhere and bincount.

meshgrid is views (reshape + expand), so gradients flow back to its inputs. nonzero, argwhere and
bincount compute their result on the host: its shape depends on the data, as in PyTorch, where
they synchronize with the device too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from gradcraft import dtypes
from gradcraft.errors import RuntimeError_
from gradcraft.ops import movement as mv
from gradcraft.ops.creation import tensor

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor


def meshgrid(*tensors: Tensor, indexing: str | None = None) -> tuple[Tensor, ...]:
    """torch.meshgrid: coordinate grids from 1-D (or 0-D) tensors; indexing "ij" (the default) or "xy"."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if indexing is None:
        indexing = "ij"
    if indexing not in ("ij", "xy"):
        raise RuntimeError_(f'torch.meshgrid: indexing must be one of "xy" or "ij", but received: {indexing}')
    if not tensors:
        raise RuntimeError_("torch.meshgrid expects a non-empty TensorList")
    for t in tensors:
        if t.ndim > 1:
            raise RuntimeError_(f"torch.meshgrid: Expected 0D or 1D tensor in the tensor list but got: {t.ndim}D")
        if t.dtype != tensors[0].dtype:
            raise RuntimeError_("meshgrid expects all tensors to have the same dtype")
        if t.device != tensors[0].device:
            raise RuntimeError_("meshgrid expects all tensors to have the same device")
    flat = [t.reshape(-1) for t in tensors]
    # "xy" swaps the first two axes of the grid (Cartesian, as NumPy's default).
    order = list(range(len(flat)))
    if indexing == "xy" and len(flat) >= 2:
        order[0], order[1] = 1, 0
    shape = tuple(flat[i].shape[0] for i in order)
    grids = []
    for i, t in enumerate(flat):
        view = [1] * len(flat)
        view[order.index(i)] = t.shape[0]
        grids.append(mv.expand(t.reshape(view), shape))
    return tuple(grids)


def nonzero(input: Tensor, *, as_tuple: bool = False) -> Tensor | tuple[Tensor, ...]:
    """torch.nonzero / Tensor.nonzero: the indices of the nonzero elements, an (n, ndim) int64 tensor,
    or with as_tuple=True one 1-D tensor per dimension (a 0-d input counts as 1-D)."""
    array = np.asarray(input.detach().numpy())
    if as_tuple:
        where = np.nonzero(array.reshape(-1) if array.ndim == 0 else array)
        return tuple(tensor(w.astype(np.int64), device=input.device) for w in where)
    return argwhere(input)


def argwhere(input: Tensor) -> Tensor:
    """torch.argwhere: as nonzero(input)."""
    array = np.asarray(input.detach().numpy())
    return tensor(np.argwhere(array).astype(np.int64), device=input.device)


def bincount(input: Tensor, weights: Tensor | None = None, minlength: int = 0) -> Tensor:
    """torch.bincount: how often each value of a 1-D non-negative integer tensor occurs, or the sums of
    weights by value. The result has max(input) + 1 (at least minlength) entries."""
    if input.dtype.is_floating_point or input.dtype == dtypes.bool_ or input.ndim != 1:
        raise RuntimeError_("bincount only supports 1-d non-negative integral inputs.")
    if minlength < 0:
        raise RuntimeError_("minlength should be >= 0")
    values = np.asarray(input.numpy()).astype(np.int64)
    if values.size and values.min() < 0:
        raise RuntimeError_("bincount only supports 1-d non-negative integral inputs.")
    if weights is None:
        return tensor(np.bincount(values, minlength=minlength).astype(np.int64), device=input.device)
    if weights.shape != input.shape:
        raise RuntimeError_("weights should be 1-d and have the same length as input")
    # PyTorch: floating weights keep their dtype, other weights count in float64.
    dtype = weights.dtype if weights.dtype.is_floating_point else dtypes.float64
    w = np.asarray(weights.detach().numpy()).astype(np.float64)
    counts = np.bincount(values, weights=w, minlength=minlength)
    return tensor(counts, dtype=dtype, device=input.device)
