"""More torch.* tensor functions programs use, composed from existing ops: roll, movedim/moveaxis,
hstack/vstack, broadcast_to, masked_select, tril_indices/triu_indices, cumprod (a log-depth scan of
products), log2/log10, clamp_min/clamp_max, addmm/baddbmm."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from gradcraft import dtypes
from gradcraft.errors import RuntimeError_
from gradcraft.ops import elementwise as ew
from gradcraft.ops import movement as mv
from gradcraft.ops.dims import normalize_dim
from gradcraft.typing import Device, DTypeLike, Shape, TensorOrNumber

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor


def _ints(value) -> list:
    return [int(v) for v in value] if isinstance(value, (list, tuple)) else [int(value)]


def roll(input: Tensor, shifts: Shape, dims: Shape | None = None) -> Tensor:
    """Elements shifted along dims (wrapping around); dims None: over the flattened tensor."""
    shifts = _ints(shifts)
    if dims is None:
        if len(shifts) != 1:
            raise RuntimeError_(f"roll: shifts and dimensions must align. shifts: {len(shifts)}, dims: 0")
        return roll(input.reshape(-1), shifts, 0).reshape(input.shape)
    dims = _ints(dims)
    if len(shifts) != len(dims):
        raise RuntimeError_(f"roll: shifts and dimensions must align. shifts: {len(shifts)}, dims:{len(dims)}")
    out = input
    for shift, dim in zip(shifts, dims):
        d = normalize_dim(dim, input.ndim)
        n = input.shape[d]
        if n == 0 or shift % n == 0:
            continue
        s = shift % n
        out = mv.cat([out.narrow(d, n - s, s), out.narrow(d, 0, n - s)], d)
    return out


def movedim(input: Tensor, source: Shape, destination: Shape) -> Tensor:
    source, destination = _ints(source), _ints(destination)
    if len(source) != len(destination):
        raise RuntimeError_(
            f"movedim: Invalid source or destination dims: source ({source} dims) should contain the same number "
            f"of dims as destination ({destination} dims)"
        )
    ndim = input.ndim
    src = [normalize_dim(d, ndim) for d in source]
    dst = [normalize_dim(d, ndim) for d in destination]
    if len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise RuntimeError_("movedim: repeated dim in `source` or `destination`")
    order = [None] * ndim
    for s, d in zip(src, dst):
        order[d] = s
    rest = iter(d for d in range(ndim) if d not in src)
    order = [o if o is not None else next(rest) for o in order]
    return input.permute(*order)


moveaxis = movedim


def hstack(tensors: Sequence[Tensor]) -> Tensor:
    tensors = [t.reshape(1) if t.ndim == 0 else t for t in tensors]
    return mv.cat(tensors, 0 if tensors[0].ndim == 1 else 1)


def vstack(tensors: Sequence[Tensor]) -> Tensor:
    return mv.cat([t.reshape(1, -1) if t.ndim < 2 else t for t in tensors], 0)


def broadcast_to(input: Tensor, shape: Shape) -> Tensor:
    return mv.expand(input, tuple(shape))


def masked_select(input: Tensor, mask: Tensor) -> Tensor:
    """The elements of input (broadcast with mask) where mask is True, as a 1-D tensor."""
    if mask.dtype != dtypes.bool_:
        raise RuntimeError_(f"masked_select: expected BoolTensor for mask, got {mask.dtype.name}")
    shape = ew.broadcast_shape(tuple(input.shape), tuple(mask.shape), "masked_select")
    return mv.expand(input, shape)[mv.expand(mask, shape)]


def _triangle_indices(row: int, col: int, offset: int, upper: bool, dtype, device) -> Tensor:
    from gradcraft.ops.creation import tensor

    rows, cols = np.triu_indices(row, offset, col) if upper else np.tril_indices(row, offset, col)
    return tensor(np.stack([rows, cols]).astype(np.int64), dtype=dtype or dtypes.int64, device=device)


def tril_indices(
    row: int, col: int, offset: int = 0, *, dtype: DTypeLike = None, device: Device = "cpu", layout: object = None
) -> Tensor:
    """The (2, N) coordinates of the lower triangle of a row x col matrix, row by row."""
    return _triangle_indices(row, col, offset, False, dtype, device)


def triu_indices(
    row: int, col: int, offset: int = 0, *, dtype: DTypeLike = None, device: Device = "cpu", layout: object = None
) -> Tensor:
    """The (2, N) coordinates of the upper triangle of a row x col matrix, row by row."""
    return _triangle_indices(row, col, offset, True, dtype, device)


def cumprod(input: Tensor, dim: int, *, dtype: DTypeLike = None) -> Tensor:
    """Running products along dim, by doubling: step k multiplies in the product k positions back."""
    x = input.to(dtype) if dtype is not None else input
    if x.dtype == dtypes.bool_:
        x = x.long()
    if x.ndim == 0:
        return x.clone()
    d = normalize_dim(dim, x.ndim)
    n = x.shape[d]
    k = 1
    while k < n:
        head = x.narrow(d, 0, k)
        x = mv.cat([head, x.narrow(d, k, n - k) * x.narrow(d, 0, n - k)], d)
        k *= 2
    return x


def log2(input: Tensor) -> Tensor:
    return ew.log(input) * (1.0 / math.log(2.0))


def log10(input: Tensor) -> Tensor:
    return ew.log(input) * (1.0 / math.log(10.0))


def clamp_min(input: Tensor, min: TensorOrNumber) -> Tensor:
    return ew.clamp(input, min=min)


def clamp_max(input: Tensor, max: TensorOrNumber) -> Tensor:
    return ew.clamp(input, max=max)


def _scaled_sum(input, product, beta, alpha):
    product = product if alpha == 1 else product * alpha
    if beta == 0:  # input is ignored (nan and inf in it do not propagate), as PyTorch
        return product
    return product + (input if beta == 1 else input * beta)


def addmm(input: Tensor, mat1: Tensor, mat2: Tensor, *, beta: float = 1, alpha: float = 1) -> Tensor:
    if mat1.ndim != 2 or mat2.ndim != 2:
        raise RuntimeError_(f"addmm: mat1 and mat2 must be matrices, got {mat1.ndim}D and {mat2.ndim}D")
    return _scaled_sum(input, mat1 @ mat2, beta, alpha)


def baddbmm(input: Tensor, batch1: Tensor, batch2: Tensor, *, beta: float = 1, alpha: float = 1) -> Tensor:
    if batch1.ndim != 3 or batch2.ndim != 3:
        raise RuntimeError_(f"baddbmm: batch1 and batch2 must be 3D tensors, got {batch1.ndim}D and {batch2.ndim}D")
    return _scaled_sum(input, batch1 @ batch2, beta, alpha)
