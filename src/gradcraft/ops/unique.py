"""torch.unique and torch.unique_consecutive (and Tensor methods), computed on the host like nonzero:
the result's length depends on the data. Sorted values; `return_inverse` (shaped as the input, or
along `dim`) and `return_counts`; no gradient, as in PyTorch."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from gradcraft.ops.creation import tensor
from gradcraft.ops.dims import normalize_dim

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor


def _result(input, values, inverse, counts, return_inverse, return_counts):
    out = [tensor(values, dtype=input.dtype, device=input.device)]
    if return_inverse:
        out.append(tensor(inverse.astype(np.int64), device=input.device))
    if return_counts:
        out.append(tensor(counts.astype(np.int64), device=input.device))
    return out[0] if len(out) == 1 else tuple(out)


def unique(
    input: Tensor,
    sorted: bool = True,
    return_inverse: bool = False,
    return_counts: bool = False,
    dim: int | None = None,
) -> Tensor | tuple[Tensor, ...]:
    array = np.asarray(input.detach().numpy())
    if dim is None:
        values, inverse, counts = np.unique(array.reshape(-1), return_inverse=True, return_counts=True)
        return _result(input, values, inverse.reshape(array.shape), counts, return_inverse, return_counts)
    d = normalize_dim(dim, array.ndim)
    values, inverse, counts = np.unique(array, return_inverse=True, return_counts=True, axis=d)
    return _result(input, values, inverse.reshape(-1), counts, return_inverse, return_counts)


def unique_consecutive(
    input: Tensor, return_inverse: bool = False, return_counts: bool = False, dim: int | None = None
) -> Tensor | tuple[Tensor, ...]:
    array = np.asarray(input.detach().numpy())
    if dim is None:
        flat = array.reshape(-1)
        starts = np.concatenate([[True], flat[1:] != flat[:-1]]) if flat.size else np.zeros(0, bool)
        values = flat[starts]
        inverse = (np.cumsum(starts) - 1).reshape(array.shape)
    else:
        d = normalize_dim(dim, array.ndim)
        moved = np.moveaxis(array, d, 0).reshape(array.shape[d], -1)
        changed = np.any(moved[1:] != moved[:-1], axis=1) if len(moved) else np.zeros(0, bool)
        starts = np.concatenate([[True], changed]) if len(moved) else np.zeros(0, bool)
        values = np.take(array, np.nonzero(starts)[0], axis=d)
        inverse = np.cumsum(starts) - 1
    counts = np.diff(np.append(np.nonzero(starts)[0], len(starts)))
    return _result(input, values, inverse, counts, return_inverse, return_counts)
