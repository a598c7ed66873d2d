"""torch.median (the lower median; with dim, values and indices) and torch.quantile (linear, lower,
higher, midpoint or nearest interpolation; q a number or a 1-D tensor), composed from sort and
gather, so gradients reach the elements picked. A NaN in a reduced slice makes its result NaN, as
in PyTorch."""

from __future__ import annotations

import math
from collections import namedtuple
from typing import TYPE_CHECKING

from gradcraft.errors import RuntimeError_
from gradcraft.ops import elementwise as ew
from gradcraft.ops.dims import normalize_dim

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor

MedianResult = namedtuple("MedianResult", ["values", "indices"])


def median(input: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor | MedianResult:
    if dim is None:
        flat = input.reshape(-1)
        if flat.numel() == 0:
            return flat.new_full((), float("nan")) if input.dtype.is_floating_point else flat.sum()
        values = flat.sort().values[(flat.numel() - 1) // 2]
        if input.dtype.is_floating_point:
            values = ew.where(flat.isnan().any(), float("nan"), values)
        return values
    d = normalize_dim(dim, max(input.ndim, 1))
    x = input.reshape(1) if input.ndim == 0 else input
    n = x.shape[d]
    ordered = x.sort(dim=d)
    values = ordered.values.narrow(d, (n - 1) // 2, 1)
    indices = ordered.indices.narrow(d, (n - 1) // 2, 1)
    if x.dtype.is_floating_point:
        nan = x.isnan().any(d, keepdim=True)
        values = ew.where(nan, float("nan"), values)
        # PyTorch points at the slice's first NaN
        first_nan = (x.isnan().long().cumsum(d) == 1).long().argmax(d, keepdim=True)
        indices = ew.where(nan, first_nan, indices)
    if not keepdim:
        values, indices = values.squeeze(d), indices.squeeze(d)
    if input.ndim == 0:
        values, indices = values.reshape(()), indices.reshape(())
    return MedianResult(values, indices)


def quantile(
    input: Tensor, q: float | Tensor, dim: int | None = None, keepdim: bool = False, *, interpolation: str = "linear"
) -> Tensor:
    from gradcraft.tensor import Tensor

    if interpolation not in ("linear", "lower", "higher", "midpoint", "nearest"):
        raise RuntimeError_(
            f"quantile() interpolation must be one of linear, lower, higher, midpoint or nearest. Got {interpolation}"
        )
    if not input.dtype.is_floating_point:
        raise RuntimeError_(f"quantile() input tensor must be either float or double dtype, got {input.dtype.name}")
    scalar_q = not isinstance(q, Tensor) or q.ndim == 0
    qs = [float(q)] if not isinstance(q, Tensor) else [float(v) for v in q.reshape(-1).tolist()]
    if isinstance(q, Tensor) and q.ndim > 1:
        raise RuntimeError_("quantile() q must be a scalar or 1D tensor")
    if any(not 0 <= v <= 1 for v in qs):
        raise RuntimeError_("quantile() q values must be in the range [0, 1]")
    if dim is None:
        x, d = input.reshape(-1), 0
    else:
        d = normalize_dim(dim, max(input.ndim, 1))
        x = input.reshape(1) if input.ndim == 0 else input
    n = x.shape[d]
    if n == 0:
        raise RuntimeError_("quantile() input tensor must be non-empty")
    ordered = x.sort(dim=d).values
    nan = x.isnan().any(d, keepdim=True)
    outs = []
    for v in qs:
        position = v * (n - 1)
        low, high = math.floor(position), math.ceil(position)
        if interpolation == "nearest":
            low = high = int(round(position))  # round half to even, as PyTorch
        elif interpolation == "lower":
            high = low
        elif interpolation == "higher":
            low = high
        a, b = ordered.narrow(d, low, 1), ordered.narrow(d, high, 1)
        if interpolation == "midpoint":
            value = a + (b - a) * 0.5
        elif interpolation == "linear":
            value = a + (b - a) * (position - low) if high != low else a
        else:
            value = a
        value = ew.where(nan, float("nan"), value)
        if dim is None:
            value = value.reshape([1] * input.ndim) if keepdim else value.reshape(())
        elif not keepdim:
            value = value.squeeze(d)
        outs.append(value)
    if scalar_q:
        return outs[0]
    from gradcraft.ops.movement import stack

    return stack(outs, 0)
