"""torch.asin / acos / atan / asinh / acosh / atanh / atan2 (kernels of their own), sinh / cosh / hypot
(optional kernels with composite fallbacks), their NumPy-style aliases (arcsin, ...), the in-place
forms, and PyTorch's gradients."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gradcraft import dtypes
from gradcraft.backend import opspec
from gradcraft.ops import elementwise as ew
from gradcraft.ops.function import apply, gradient

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor

_INF = float("inf")


def _float(x: Tensor) -> Tensor:
    """x, or x in the default float dtype where it holds integers or booleans (as in PyTorch)."""
    return x if x.dtype.is_floating_point else ew.cast(x, dtypes.default_float)


def _unary(spec, x: Tensor) -> Tensor:
    x = _float(x)
    return apply(spec, (x,), {}, x.shape, x.dtype)


def _binary(spec, input, other, name: str) -> Tensor:
    # (PyTorch takes no Python number here: atan2(x, 2.0) is a TypeError)
    for arg, position, value in (("input", 1, input), ("other", 2, other)):
        if not ew._is_tensor(value):
            raise TypeError(
                f"{name}(): argument '{arg}' (position {position}) must be Tensor, not {type(value).__name__}"
            )
    a, b = ew._operands(input, other, name)
    a, b = _float(a), _float(b)
    return apply(spec, (a, b), {}, ew.broadcast_shape(a.shape, b.shape, name), a.dtype)


# ------------------------------------------------------------------ inverse trigonometric / hyperbolic


@opspec.ASIN.function
def asin(input: Tensor) -> Tensor:
    """torch.asin: the arcsine, elementwise (NaN outside [-1, 1])."""
    return _unary(opspec.ASIN, input)


@opspec.ACOS.function
def acos(input: Tensor) -> Tensor:
    """torch.acos: the arccosine, elementwise (NaN outside [-1, 1])."""
    return _unary(opspec.ACOS, input)


@opspec.ATAN.function
def atan(input: Tensor) -> Tensor:
    """torch.atan: the arctangent, elementwise."""
    return _unary(opspec.ATAN, input)


@opspec.ASINH.function
def asinh(input: Tensor) -> Tensor:
    """torch.asinh: the inverse hyperbolic sine, elementwise."""
    return _unary(opspec.ASINH, input)


@opspec.ACOSH.function
def acosh(input: Tensor) -> Tensor:
    """torch.acosh: the inverse hyperbolic cosine, elementwise (NaN below 1)."""
    return _unary(opspec.ACOSH, input)


@opspec.ATANH.function
def atanh(input: Tensor) -> Tensor:
    """torch.atanh: the inverse hyperbolic tangent, elementwise (+-inf at +-1, NaN outside)."""
    return _unary(opspec.ATANH, input)


@opspec.ATAN2.function
def atan2(input: Tensor, other: Tensor) -> Tensor:
    """torch.atan2: the angle of the point (other, input), elementwise with broadcasting."""
    return _binary(opspec.ATAN2, input, other, "atan2")


# PyTorch's rules (tools/autograd/derivatives.yaml), written with the same operations so that the
# edge values (the poles at +-1, the origin of atan2) give PyTorch's infinities and NaNs.
@gradient(opspec.ASIN)
def _asin_grad(node, out, g):
    x = node.inputs[0]
    return (ew.mul(g, ew.rsqrt(ew.sub(1.0, ew.mul(x, x)))),)


@gradient(opspec.ACOS)
def _acos_grad(node, out, g):
    x = node.inputs[0]
    return (ew.mul(ew.neg(g), ew.rsqrt(ew.sub(1.0, ew.mul(x, x)))),)


@gradient(opspec.ATAN)
def _atan_grad(node, out, g):
    x = node.inputs[0]
    return (ew.div(g, ew.add(ew.mul(x, x), 1.0)),)


@gradient(opspec.ASINH)
def _asinh_grad(node, out, g):
    x = node.inputs[0]
    return (ew.mul(g, ew.rsqrt(ew.add(ew.mul(x, x), 1.0))),)


@gradient(opspec.ACOSH)
def _acosh_grad(node, out, g):
    x = node.inputs[0]
    return (ew.mul(g, ew.rsqrt(ew.sub(ew.mul(x, x), 1.0))),)


@gradient(opspec.ATANH)
def _atanh_grad(node, out, g):
    x = node.inputs[0]
    return (ew.div(g, ew.sub(1.0, ew.mul(x, x))),)


@gradient(opspec.ATAN2)
def _atan2_grad(node, out, g):
    a, b = node.inputs
    recip = ew.div(1.0, ew.add(ew.mul(a, a), ew.mul(b, b)))
    grad_a = ew.sum_to(ew.mul(g, ew.mul(b, recip)), a.shape) if a.requires_grad else None
    grad_b = ew.sum_to(ew.mul(g, ew.mul(ew.neg(a), recip)), b.shape) if b.requires_grad else None
    return grad_a, grad_b


# ------------------------------------------------------------------ sinh / cosh / hypot


@opspec.SINH.function
def sinh(input: Tensor) -> Tensor:
    """torch.sinh: the hyperbolic sine, elementwise."""
    return _unary(opspec.SINH, input)


@opspec.COSH.function
def cosh(input: Tensor) -> Tensor:
    """torch.cosh: the hyperbolic cosine, elementwise."""
    return _unary(opspec.COSH, input)


@opspec.HYPOT.function
def hypot(input: Tensor, other: Tensor) -> Tensor:
    """torch.hypot: sqrt(input**2 + other**2) elementwise with broadcasting, without overflow."""
    return _binary(opspec.HYPOT, input, other, "hypot")


@gradient(opspec.SINH)
def _sinh_grad(node, out, g):
    return (ew.mul(g, cosh(node.inputs[0])),)


@gradient(opspec.COSH)
def _cosh_grad(node, out, g):
    return (ew.mul(g, sinh(node.inputs[0])),)


@gradient(opspec.HYPOT)
def _hypot_grad(node, out, g):
    a, b = node.inputs
    grad_a = ew.sum_to(ew.mul(g, ew.div(a, out)), a.shape) if a.requires_grad else None
    return grad_a, (ew.sum_to(ew.mul(g, ew.div(b, out)), b.shape) if b.requires_grad else None)


def _in_float32(fn, *xs):
    """fn computed in float32 for 16-bit inputs (as the kernels do), rounded once."""
    if xs[0].dtype in (dtypes.float16, dtypes.bfloat16):
        return fn(*(x.float() for x in xs)).to(xs[0].dtype)
    return fn(*xs)


# The composites' own gradients are PyTorch's rules: d/dx of (exp(x) - exp(-x)) / 2 is cosh(x) (and
# of the series, to its precision), and big * sqrt((a/big)^2 + (b/big)^2) with big held constant gives
# a / hypot (NaN at the origin).
def _sinh_value(x):
    # the Taylor series where exp(x) - exp(-x) would cancel (its next term is below 1e-8 relative);
    # the series reads 0 elsewhere, so that its gradient stays finite at large |x|
    small = ew.lt(ew.abs(x), 0.5)
    s = ew.where(small, x, 0.0)
    s2 = s * s
    series = s * (1.0 + s2 * (1.0 / 6 + s2 * (1.0 / 120 + s2 * (1.0 / 5040 + s2 / 362880))))
    return ew.where(small, series, (ew.exp(x) - ew.exp(-x)) * 0.5)


@opspec.SINH.fallback
def _sinh_composite(x):
    return _in_float32(_sinh_value, x)


@opspec.COSH.fallback
def _cosh_composite(x):
    return _in_float32(lambda w: (ew.exp(w) + ew.exp(-w)) * 0.5, x)


def _hypot_value(a, b):
    # scaled by the larger magnitude so that squares neither overflow nor underflow; an infinite side
    # wins over a NaN on the other, as in C's hypot
    big = ew.maximum(ew.abs(a), ew.abs(b)).detach()
    safe = ew.where(ew.eq(big, 0.0), 1.0, big)
    ra, rb = a / safe, b / safe
    value = safe * ew.sqrt(ra * ra + rb * rb)
    infinite = ew.logical_or(ew.eq(ew.abs(a), _INF), ew.eq(ew.abs(b), _INF))
    return ew.where(infinite, _INF, value)


@opspec.HYPOT.fallback
def _hypot_composite(a, b):
    return _in_float32(_hypot_value, a, b)


# ------------------------------------------------------------------ aliases and in-place forms

arcsin, arccos, arctan, arcsinh, arccosh, arctanh, arctan2 = asin, acos, atan, asinh, acosh, atanh, atan2
ALIASES = {
    "arcsin": asin,
    "arccos": acos,
    "arctan": atan,
    "arcsinh": asinh,
    "arccosh": acosh,
    "arctanh": atanh,
    "arctan2": atan2,
}
UNARY = {"asin": asin, "acos": acos, "atan": atan, "asinh": asinh, "acosh": acosh, "atanh": atanh}
UNARY.update({"sinh": sinh, "cosh": cosh})
BINARY = {"atan2": atan2, "hypot": hypot}
