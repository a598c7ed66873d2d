"""torch.index_fill / Tensor.index_fill(_): the slices at `index` along `dim` set to `value`, as a
`where` over a mask of those slices (so the gradient reaches the other elements, and a tensor value
gets the sum of the filled positions' gradients)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gradcraft import dtypes
from gradcraft.errors import IndexError_, RuntimeError_
from gradcraft.ops import elementwise as ew
from gradcraft.ops.dims import normalize_dim
from gradcraft.typing import TensorOrNumber

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor


def index_fill(input: Tensor, dim: int, index: Tensor, value: TensorOrNumber) -> Tensor:
    from gradcraft.ops.creation import arange
    from gradcraft.tensor import Tensor

    if index.ndim > 1 or index.dtype != dtypes.int64:
        raise RuntimeError_("index_fill_(): Expected a long tensor for index, but got " + index.dtype.name)
    if isinstance(value, Tensor) and value.ndim != 0:
        raise RuntimeError_(
            f"index_fill_ only supports a 0-dimensional value tensor, but got tensor with {value.ndim} dimension(s)."
        )
    d = normalize_dim(dim, max(input.ndim, 1))
    n = input.shape[d] if input.ndim else 1
    flat = index.reshape(-1)
    if flat.numel():
        low, high = int(flat.min().item()), int(flat.max().item())
        if low < -n or high >= n:
            raise IndexError_(f"index {high if high >= n else low} is out of bounds for dimension {d} with size {n}")
    flat = ew.where(flat < 0, flat + n, flat)
    hit = (arange(n, device=input.device).unsqueeze(1) == flat.unsqueeze(0)).any(1)
    shape = [1] * input.ndim
    if input.ndim:
        shape[d] = n
    mask = hit.reshape(shape) if input.ndim else hit.reshape(())
    if isinstance(value, Tensor):
        value = value.to(input.dtype)
    return ew.where(mask, value, input)


def index_fill_(input: Tensor, dim: int, index: Tensor, value: TensorOrNumber) -> Tensor:
    from gradcraft.ops.inplace import write

    return write(input, index_fill(input, dim, index, value))
