"""torch.erf / erfc (and Tensor methods): Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7, the formula
the exact GELU's kernels use), composed from elementwise ops; the gradient is the exact
2 / sqrt(pi) * exp(-x^2), not the approximation's."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from gradcraft.ops import elementwise as ew

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor


def erf(input: Tensor) -> Tensor:
    x = input if input.dtype.is_floating_point else input.float()
    t = 1.0 / (ew.abs(x) * 0.3275911 + 1.0)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    value = ew.sign(x) * (1.0 - poly * ew.exp(-(x * x)))
    if not x.requires_grad:
        return value
    slope = ew.exp(-(x * x)) * (2.0 / math.sqrt(math.pi))
    return value.detach() + (x - x.detach()) * slope.detach()


def erfc(input: Tensor) -> Tensor:
    return 1.0 - erf(input)
