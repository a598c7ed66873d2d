"""Rounding and number tests: floor, ceil, trunc, round, // and %, isnan, isinf, isfinite, isclose.

Composed from casts and comparisons (no kernels of their own): a cast to an integer dtype truncates
toward zero and carries no gradient, so floor(x) and friends are constants to autograd (PyTorch's
gradient of these is zero as well), and `a % b` gets PyTorch's gradients (1 for a, -floor(a/b) for b)
through the ordinary rules of sub and mul.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from gradcraft.typing import TensorOrNumber

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor

from gradcraft import dtypes
from gradcraft.errors import UserError
from gradcraft.ops import elementwise as ew

_EXACT = 2.0**52  # float64 values this large are already integers (float32: from 2**23)


def trunc(input: Tensor) -> Tensor:
    if not input.dtype.is_floating_point:
        return input
    whole = ew.cast(ew.cast(input, dtypes.int64), input.dtype)
    # Large values, inf and NaN have no fractional part (and would not fit in an int64).
    return ew.where(ew.lt(ew.abs(input), _EXACT), whole, input)


def floor(input: Tensor) -> Tensor:
    t = trunc(input)
    return t if not input.dtype.is_floating_point else ew.sub(t, ew.cast(ew.gt(t, input), input.dtype))


def ceil(input: Tensor) -> Tensor:
    t = trunc(input)
    return t if not input.dtype.is_floating_point else ew.add(t, ew.cast(ew.lt(t, input), input.dtype))


def round(input: Tensor, decimals: int = 0) -> Tensor:
    """Half to even, as torch.round."""
    if not input.dtype.is_floating_point:
        return input
    scale = 10.0**decimals
    y = ew.mul(input, scale) if decimals else input
    f = floor(y)
    diff = ew.sub(y, f)
    half = ew.eq(diff, 0.5)
    f_is_odd = ew.ne(ew.sub(f, ew.mul(floor(ew.mul(f, 0.5)), 2.0)), 0)
    up = ew.logical_or(ew.gt(diff, 0.5), ew.logical_and(half, f_is_odd))
    out = ew.add(f, ew.cast(up, input.dtype))
    return ew.div(out, scale) if decimals else out


def floor_divide(input: TensorOrNumber, other: TensorOrNumber) -> Tensor:
    """a // b rounded toward minus infinity (PyTorch and Python); integers stay integers."""
    a_t, b_t = ew._operands(input, other, "floor_divide")
    if a_t.dtype.is_floating_point:
        return floor(ew.div(a_t, b_t))
    if a_t.dtype == dtypes.bool_:
        raise UserError("floor_divide is not defined for bool tensors; convert with .long() first")
    quotient = floor(ew.div(ew.cast(a_t, dtypes.float64), ew.cast(b_t, dtypes.float64)))
    return ew.cast(quotient, a_t.dtype)


def remainder(input: TensorOrNumber, other: TensorOrNumber) -> Tensor:
    """a % b with the sign of b (Python's and PyTorch's %)."""
    a_t, b_t = ew._operands(input, other, "remainder")
    if a_t.dtype.is_floating_point:
        return ew.sub(a_t, ew.mul(floor(ew.div(a_t, b_t)), b_t))
    return ew.sub(a_t, ew.mul(floor_divide(a_t, b_t), b_t))


def fmod(input: TensorOrNumber, other: TensorOrNumber) -> Tensor:
    """a - trunc(a / b) * b (the sign of a), as torch.fmod."""
    a_t, b_t = ew._operands(input, other, "fmod")
    if a_t.dtype.is_floating_point:
        return ew.sub(a_t, ew.mul(trunc(ew.div(a_t, b_t)), b_t))
    q = ew.cast(trunc(ew.div(ew.cast(a_t, dtypes.float64), ew.cast(b_t, dtypes.float64))), a_t.dtype)
    return ew.sub(a_t, ew.mul(q, b_t))


def div_rounded(input: TensorOrNumber, other: TensorOrNumber, *, rounding_mode: str | None = None) -> Tensor:
    """torch.div(a, b, rounding_mode=None | "trunc" | "floor")."""
    if rounding_mode is None:
        return ew.div(input, other)
    if rounding_mode == "floor":
        return floor_divide(input, other)
    if rounding_mode == "trunc":
        a_t, b_t = ew._operands(input, other, "div")
        if a_t.dtype.is_floating_point:
            return trunc(ew.div(a_t, b_t))
        return ew.cast(trunc(ew.div(ew.cast(a_t, dtypes.float64), ew.cast(b_t, dtypes.float64))), a_t.dtype)
    raise UserError(f"div: rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}")


def isnan(input: Tensor) -> Tensor:
    return ew.ne(input, input)  # only NaN differs from itself


def isinf(input: Tensor) -> Tensor:
    if not input.dtype.is_floating_point:
        return ew.ne(input, input)
    return ew.eq(ew.abs(input), float("inf"))


def isfinite(input: Tensor) -> Tensor:
    if not input.dtype.is_floating_point:
        return ew.eq(input, input)
    return ew.eq(ew.sub(input, input), 0.0)  # inf - inf and NaN - NaN are NaN


def isclose(
    input: TensorOrNumber, other: TensorOrNumber, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False
) -> Tensor:
    a_t, b_t = ew._operands(input, other, "isclose")
    if not a_t.dtype.is_floating_point:
        return ew.eq(a_t, b_t)
    close = ew.le(ew.abs(ew.sub(a_t, b_t)), ew.add(ew.mul(ew.abs(b_t), rtol), atol))
    close = ew.logical_or(close, ew.eq(a_t, b_t))  # equal infinities
    if equal_nan:
        close = ew.logical_or(close, ew.logical_and(isnan(a_t), isnan(b_t)))
    return close
