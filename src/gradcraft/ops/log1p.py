"""torch.log1p and torch.expm1, accurate for small arguments, composed from log/exp and where.

log1p(x) = log(u) * x / (u - 1) with u = 1 + x (x itself where u rounds to 1), and
expm1(x) = (u - 1) * x / log(u) with u = exp(x) (Goldberg's and Kahan's corrections: a few ulps).
The corrected value carries no gradient of its own; the gradients are PyTorch's, 1 / (1 + x) and
expm1(x) + 1."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gradcraft.ops import elementwise as ew

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor


def _with_gradient_of(value: Tensor, smooth: Tensor) -> Tensor:
    """value's numbers, smooth's gradient."""
    return value.detach() + (smooth - smooth.detach())


def log1p(input: Tensor) -> Tensor:
    x = input if input.dtype.is_floating_point else input.float()
    u = x + 1.0
    plain = ew.log(u)
    exact = ew.eq(u, 1.0)
    denominator = ew.where(exact, 1.0, u - 1.0)
    value = ew.where(exact, x, plain * x / denominator)
    value = ew.where(ew.eq(ew.abs(x), float("inf")), plain, value)
    return _with_gradient_of(value, plain) if x.requires_grad else value


def expm1(input: Tensor) -> Tensor:
    x = input if input.dtype.is_floating_point else input.float()
    u = ew.exp(x)
    exact = ew.eq(u, 1.0)
    log_u = ew.where(exact, 1.0, ew.log(u))
    value = ew.where(exact, x, (u - 1.0) * x / log_u)
    value = ew.where(ew.eq(u - 1.0, -1.0), -1.0, value)  # exp underflowed to 0
    value = ew.where(ew.eq(u, float("inf")), u, value)
    if not x.requires_grad:
        return value
    # PyTorch's gradient: (expm1(x) + 1) * grad
    return value.detach() + (x - x.detach()) * (value + 1.0).detach()
