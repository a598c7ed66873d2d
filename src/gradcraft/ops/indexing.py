"""Indexing: `x[index]` and `x[index] = value` with ints, slices, None, Ellipsis, integer index
tensors (gathers and scatters) and boolean masks (computed first: the result's shape depends on
them), as in PyTorch; index_select.

A basic index (no tensors in it) is a view: movement.basic_index. The writes go through
inplace.write, with PyTorch's in-place semantics.
"""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING

import numpy as np

from gradcraft import dtypes
from gradcraft.backend import opspec
from gradcraft.errors import IndexError_, RuntimeError_, UserError
from gradcraft.ops import elementwise as ew
from gradcraft.ops import movement as mv
from gradcraft.ops.dims import normalize_dim
from gradcraft.ops.function import apply, gradient, is_grad_enabled, no_grad
from gradcraft.ops.inplace import _Before, write
from gradcraft.tensor import Tensor

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor


def _is_index_tensor(item) -> bool:
    return isinstance(item, (Tensor, list, np.ndarray, range))


def _as_index_tensor(item, device):
    if isinstance(item, Tensor):
        if item.dtype.kind not in "iu":
            raise UserError(f"tensors used as indices must be integers or booleans, got {item.dtype.name}")
        return item.to(dtypes.int64)
    return Tensor(np.asarray(item, dtype=np.int64), device=device)


def _is_bool_mask(item) -> bool:
    if isinstance(item, Tensor):
        return item.dtype == dtypes.bool_
    return isinstance(item, (np.ndarray, list)) and np.asarray(item).dtype == np.bool_


def _masks_to_indices(index: tuple, device) -> tuple:
    """A boolean mask of k dimensions stands for the k integer index tensors of its True positions
    (NumPy's and PyTorch's rule). Their number depends on the data, so the mask is computed here."""
    out = []
    for item in index:
        if _is_bool_mask(item):
            mask = item.numpy() if isinstance(item, Tensor) else np.asarray(item)
            out.extend(Tensor(positions.astype(np.int64), device=device) for positions in np.nonzero(mask))
            if mask.ndim == 0:
                raise UserError("a 0-d boolean index is not supported; use where()")
        else:
            out.append(item)
    return tuple(out)


def getitem(x, key):
    """`x[...]` with ints, slices (positive steps), None, Ellipsis, integer tensors/lists (gathers)
    and boolean masks (which are computed first: the result's shape depends on them)."""
    key = key if isinstance(key, tuple) else (key,)
    if builtins.any(_is_bool_mask(i) for i in key):
        key = _masks_to_indices(key, x.device)
    key = mv.expand_ellipsis(key, x.ndim)
    if any(_is_index_tensor(i) for i in key):
        return _advanced_index(x, key)
    return mv.basic_index(x, key)


def _advanced_index(x, index):
    spec, tensors, out_shape = advanced_spec(x, index)
    return apply(opspec.INDEX, (x, *tensors), {"spec": spec}, out_shape, x.dtype)


def advanced_spec(x, index):
    """(spec, index tensors, result shape) of an index with tensors in it, as the "index" kernel
    takes them: spec holds, per dimension, a position in the tensors or a (start, stop, step)."""
    spec, tensors, dim = [], [], 0
    for item in index:
        if item is None:
            raise UserError("None cannot be combined with tensor indices; unsqueeze first")
        if not isinstance(item, slice):
            # an int among tensor indices acts as a 0-d index tensor (NumPy's rules, which PyTorch shares)
            t = _as_index_tensor(item if _is_index_tensor(item) else np.int64(int(item)), x.device)
            spec.append(len(tensors))
            tensors.append(t)
        else:
            if item.step is not None and item.step <= 0:
                raise UserError("slice step must be positive")
            spec.append(item.indices(x.shape[dim]))
        dim += 1
    # The output shape follows NumPy's rules, which PyTorch shares: compute it on empty stand-ins.
    probe = np.empty(x.shape, dtype=np.bool_)
    stand_ins = [np.zeros(t.shape, dtype=np.int64) for t in tensors]
    out_shape = probe[tuple(stand_ins[s] if isinstance(s, int) else slice(*s) for s in spec)].shape
    return tuple(spec), tensors, out_shape


@gradient(opspec.INDEX)
def _index_grad(node, out, g):
    x, *indices = node.inputs
    grad = apply(opspec.INDEX_PUT_ADD, (g, *indices), {"spec": node.attrs["spec"], "shape": x.shape}, x.shape, g.dtype)
    return (grad,) + (None,) * len(indices)


def index_select(input: Tensor, dim: int, index: Tensor) -> Tensor:
    d = normalize_dim(dim, input.ndim)
    if index.ndim != 1:
        raise UserError(f"index_select: the index must be 1-d, got shape {tuple(index.shape)}")
    return getitem(input, (slice(None),) * d + (index,))


# ------------------------------------------------------------------ x[index] = value


def setitem(x, key, value):
    """`x[index] = value` with ints, slices, None, Ellipsis, integer index tensors and boolean masks."""
    if not isinstance(value, Tensor):
        value = (
            Tensor(np.asarray(value), device=x.device)
            if isinstance(value, (list, tuple, np.ndarray))
            else ew.scalar(value, x.dtype, x.device)
        )
    value = ew.cast(value, x.dtype)  # x[i] = v converts v as copy_ does (int_tensor[0] = 2.7 stores 2)
    parts = key if isinstance(key, tuple) else (key,)
    before = _Before(x)
    if builtins.any(_is_bool_mask(i) for i in parts):
        if value.numel() == 1 and len(parts) == 1 and isinstance(parts[0], Tensor):
            mask = parts[0]  # x[mask] = scalar: a where(), no data-dependent shapes
            if x.shape[: mask.ndim] != mask.shape:
                raise IndexError_(
                    f"a boolean mask of shape {tuple(mask.shape)} does not match the leading "
                    f"dimensions of a tensor of shape {x.shape}"
                )
            mask = mask.reshape(mask.shape + (1,) * (x.ndim - mask.ndim))
            return write(x, ew.where(mask, ew.cast(value.reshape(()), x.dtype), x), before)
        parts = _masks_to_indices(parts, x.device)
    recording = is_grad_enabled() and (x.requires_grad or value.requires_grad)
    full = mv.expand_ellipsis(parts, x.ndim)
    if builtins.any(_is_index_tensor(i) for i in full):
        return write(x, _index_put(x, full, value), before)
    if not recording:
        return write(mv.basic_index(x, full), value)  # a view of x: the write lands in x's memory
    return write(x, _slice_put(x, full, value), before)


def _slice_put(x, index, value):
    """x with value written at a basic index (ints, slices, None), as lazy differentiable ops."""
    slices, target_shape = mv.basic_slices(x.shape, index)
    box = tuple(len(range(*s)) for s in slices)  # the written block, one entry per dimension of x
    value = ew.cast(value, x.dtype)
    value = (
        mv.expand(value, ew.broadcast_shape(target_shape, value.shape, "setitem"))
        if value.shape != target_shape
        else value
    )
    if value.shape != target_shape:
        raise RuntimeError_(
            f"shape mismatch: value of shape {value.shape} cannot be written to a slice of shape {target_shape}"
        )
    value = mv.contiguous(value.reshape(box))
    placed = mv.put_slices([value], [slices], x.shape)
    with no_grad():
        hit = mv.put_slices(
            [
                apply(
                    opspec.FULL,
                    (),
                    {"shape": box, "value": 1, "dtype": np.dtype(np.int32)},
                    box,
                    dtypes.int32,
                    device=x.device,
                )
            ],
            [slices],
            x.shape,
        )
    return ew.where(ew.ne(hit, 0), placed, x)


def _index_put(x, index, value):
    """x with value written at an advanced index; duplicate positions: undefined, as in PyTorch."""
    spec, tensors, out_shape = advanced_spec(x, index)
    value = ew.cast(value, x.dtype)
    if value.shape != tuple(out_shape):
        value = mv.contiguous(mv.expand(value, ew.broadcast_shape(tuple(out_shape), value.shape, "index_put")))
        if value.shape != tuple(out_shape):
            raise RuntimeError_(
                f"shape mismatch: value of shape {value.shape} cannot be written to an index of "
                f"shape {tuple(out_shape)}"
            )
    attrs = {"spec": spec, "shape": x.shape}
    with no_grad():
        ones = apply(
            opspec.FULL,
            (),
            {"shape": tuple(out_shape), "value": 1, "dtype": x.dtype.np},
            tuple(out_shape),
            x.dtype,
            device=x.device,
        )
        count = apply(opspec.INDEX_PUT_ADD, (ones, *tensors), attrs, x.shape, x.dtype)
    scattered = apply(opspec.INDEX_PUT_ADD, (value, *tensors), attrs, x.shape, x.dtype)
    if x.dtype.is_floating_point:
        averaged = ew.div(scattered, ew.maximum(count, 1))  # a repeated position gets the value once
        if value.requires_grad:
            # PyTorch's gradient: each write to a repeated position gets that position's whole gradient
            # (value.grad = grad[index]), not a share of it; the forward stays the average.
            through = ew.add(averaged.detach(), ew.sub(scattered, scattered.detach()))
            averaged = ew.where(ew.gt(count, 1), through, averaged)
        scattered = averaged
    else:
        scattered = ew.cast(ew.div(scattered, ew.maximum(count, 1)), x.dtype)
    return ew.where(ew.ne(count, 0), scattered, x)


@gradient(opspec.INDEX_PUT_ADD)
def _index_put_add_grad(node, out, g):
    value, *indices = node.inputs
    return (apply(opspec.INDEX, (g, *indices), {"spec": node.attrs["spec"]}, value.shape, g.dtype),) + (None,) * len(
        indices
    )
