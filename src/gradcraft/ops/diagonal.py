"""torch.diag, torch.diagonal, torch.trace, torch.diag_embed and Tensor.unfold, composed from views,
index_select and pad, so their gradients come from those ops.

A diagonal of a matrix is a strided slice of the matrix flattened: element (i, i + k) of an
(n, m) matrix sits at i * (m + 1) + k.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gradcraft.errors import RuntimeError_
from gradcraft.ops import movement as mv
from gradcraft.ops.dims import normalize_dim

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor


def diagonal(input: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    """The diagonal `offset` of the matrices spanned by dim1 and dim2, as the last dimension."""
    ndim = input.ndim
    if ndim < 2:
        raise RuntimeError_(f"diagonal dimensions requires ndim larger than 1, but got ndim = {ndim}")
    d1, d2 = normalize_dim(dim1, ndim), normalize_dim(dim2, ndim)
    if d1 == d2:
        raise RuntimeError_(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    rest = [d for d in range(ndim) if d not in (d1, d2)]
    x = input.permute(*rest, d1, d2)
    n, m = input.shape[d1], input.shape[d2]
    start = offset if offset >= 0 else -offset * m
    length = max(0, min(n, m - offset) if offset >= 0 else min(n + offset, m))
    batch = tuple(x.shape[:-2])
    flat = x.reshape(*batch, n * m)
    if length == 0:
        return flat.narrow(-1, 0, 0)
    index = (Ellipsis, slice(start, start + (length - 1) * (m + 1) + 1, m + 1))
    return mv.basic_index(flat, mv.expand_ellipsis(index, flat.ndim))


def diag_embed(input: Tensor, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Tensor:
    """Matrices whose diagonal `offset` (spanned by dim1, dim2 of the result) holds input's last dimension."""
    from gradcraft.ops.creation import eye

    n = input.shape[-1]
    square = input.unsqueeze(-1) * eye(n, dtype=input.dtype, device=input.device)  # (..., n, n)
    pads = (offset, 0, 0, offset) if offset >= 0 else (0, -offset, -offset, 0)
    out = mv.pad(square, pads) if offset else square
    ndim = out.ndim
    d1, d2 = normalize_dim(dim1, ndim), normalize_dim(dim2, ndim)
    if d1 == d2:
        raise RuntimeError_(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    # the two new dimensions are the last two of `out`; move them to d1 and d2
    order = [None] * ndim
    order[d1], order[d2] = ndim - 2, ndim - 1
    others = iter(range(ndim - 2))
    order = [o if o is not None else next(others) for o in order]
    return out.permute(*order)


def diag(input: Tensor, diagonal: int = 0) -> Tensor:
    """A vector's square matrix with it on diagonal `diagonal`, or a matrix's diagonal `diagonal`."""
    if input.ndim == 1:
        return diag_embed(input, diagonal)
    if input.ndim == 2:
        return globals()["diagonal"](input, diagonal)
    raise RuntimeError_(f"diag(): Supports 1D or 2D tensors. Got {input.ndim}D")


def trace(input: Tensor) -> Tensor:
    """The sum of a matrix's main diagonal."""
    if input.ndim != 2:
        raise RuntimeError_(f"trace: expected a matrix, but got tensor with dim {input.ndim}")
    return diagonal(input).sum()


def unfold(self: Tensor, dimension: int, size: int, step: int) -> Tensor:
    """Tensor.unfold: every slice of `size` elements along `dimension`, `step` apart; the slices' index
    replaces `dimension` and their elements form a new last dimension."""
    from gradcraft.ops.creation import arange
    from gradcraft.ops.indexing import index_select

    d = normalize_dim(dimension, max(self.ndim, 1))
    length = self.shape[d] if self.ndim else 1
    if size > length:
        raise RuntimeError_(f"maximum size for tensor at dimension {d} is {length} but size is {size}")
    if step <= 0:
        raise RuntimeError_(f"step is {step} but must be > 0")
    if self.ndim == 0:
        return self.reshape(1)
    count = (length - size) // step + 1
    index = (arange(count, device=self.device) * step).unsqueeze(1) + arange(size, device=self.device)
    picked = index_select(self, d, index.reshape(-1))
    windows = picked.reshape(*self.shape[:d], count, size, *self.shape[d + 1 :])
    order = [i for i in range(windows.ndim) if i != d + 1] + [d + 1]
    return windows.permute(*order)
