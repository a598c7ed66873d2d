"""Elementwise ops (unary, binary with broadcasting, where, cast, clamp) and their gradients."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING
from gradcraft.backend import opspec
from gradcraft.typing import Number, TensorOrNumber

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor

import builtins

import numpy as np

from gradcraft import dtypes
from gradcraft.dtypes import promote_types, scalar_result_dtype
from gradcraft.errors import RuntimeError_, UserError
from gradcraft.ops.function import apply, gradient
from gradcraft.amp import policy as _amp
from gradcraft.tensor import Tensor


def _is_tensor(x) -> bool:
    return isinstance(x, Tensor)


# Realized 0-d constants of the CPU, by (device, dtype, value's type and repr): `x * 2` reads one
# instead of building and running a `full` node each time (half the host work of a small eager op).
# A GPU keeps the lazy node: making a realized constant there is a host-to-device copy, which a step
# being recorded as a CUDA graph cannot hold.
_CONSTANTS: dict = {}
_MAX_CONSTANTS = 4096


def scalar(value, dtype, device):
    """A 0-d constant: on the CPU a cached realized one, elsewhere a lazy `full` node."""
    if device == "cpu":
        key = (dtype.name, type(value), repr(value))
        t = _CONSTANTS.get(key)
        if t is None:
            if len(_CONSTANTS) >= _MAX_CONSTANTS:
                _CONSTANTS.clear()
            t = Tensor(np.array(value, dtype=dtype.np), dtype=dtype)
            _CONSTANTS[key] = t
        return t
    return apply(opspec.FULL, (), {"shape": (), "value": value, "dtype": dtype.np}, (), dtype, device=device)


def broadcast_shapes(a: tuple, b: tuple) -> tuple:
    """NumPy's broadcast shape of a and b (ValueError where they do not broadcast), the common cases
    (equal shapes, a scalar) first: NumPy's general rule costs microseconds, and every binary op asks."""
    if a == b or not b:
        return tuple(a)
    if not a:
        return tuple(b)
    return tuple(np.broadcast_shapes(a, b))


def broadcast_shape(a: tuple, b: tuple, op: str = "op") -> tuple:
    try:
        return broadcast_shapes(a, b)
    except ValueError:
        raise RuntimeError_(f"shape mismatch in {op}: {a} and {b} cannot be broadcast together") from None


def _check_devices(a, b, op) -> None:
    if a.device != b.device:
        raise RuntimeError_(f"{op} got tensors on different devices ({a.device} and {b.device}); move one with .to()")


def _operands(a, b, op: str):
    """Make both operands tensors of one dtype (PyTorch promotion; Python scalars are weak)."""
    if not _is_tensor(a) and not _is_tensor(b):
        raise TypeError(f"{op} needs at least one tensor")
    if not _is_tensor(b):
        dtype = scalar_result_dtype(a.dtype, b)
        return cast(a, dtype), scalar(b, dtype, a.device)
    if not _is_tensor(a):
        dtype = scalar_result_dtype(b.dtype, a)
        return scalar(a, dtype, b.device), cast(b, dtype)
    _check_devices(a, b, op)
    dtype = promote_types(a.dtype, b.dtype)
    return cast(a, dtype), cast(b, dtype)


def cast(x, dtype):
    dtype = dtypes.to_dtype(dtype)
    if x.dtype == dtype:
        return x
    return apply(opspec.CAST, (x,), {"dtype": dtype.np}, x.shape, dtype)


@gradient(opspec.CAST)
def _cast_grad(node, out, g):
    return (cast(g, node.inputs[0].dtype),)


# ------------------------------------------------------------------ unary


def _unary(op, x, keeps_integers: bool = False, **attrs):
    """op(x): on an integer tensor, in the default float dtype unless the op keeps integers (as in PyTorch)."""
    if x.dtype.is_floating_point or keeps_integers:
        return apply(op, (x,), attrs, x.shape, x.dtype)
    return apply(op, (cast(x, dtypes.default_float),), attrs, x.shape, dtypes.default_float)


# the unary and binary ops of autocast's policy (gradcraft/amp/policy.py)
AUTOCAST_UNARY, AUTOCAST_BINARY = ("exp", "log", "rsqrt"), ("pow",)


def _unary_op(op: str, keeps_integers: bool = False) -> Callable[[Tensor], Tensor]:
    """The function of the unary op `op` (neg(x), exp(x), ...)."""

    def function(input: Tensor) -> Tensor:
        return _unary(op, input, keeps_integers)

    if op in AUTOCAST_UNARY:

        def function(input: Tensor) -> Tensor:  # noqa: F811  (the same, with autocast's check first)
            if _amp.state.on:
                return _amp.call(op, function, (input,), {})
            return _unary(op, input, keeps_integers)

    function.__name__ = function.__qualname__ = op
    return function


# the unary ops of one kernel each (their gradients below)
neg = _unary_op(opspec.NEG, keeps_integers=True)
abs = _unary_op(opspec.ABS, keeps_integers=True)
sign = _unary_op(opspec.SIGN, keeps_integers=True)
relu = _unary_op(opspec.RELU, keeps_integers=True)
exp = _unary_op(opspec.EXP)
log = _unary_op(opspec.LOG)
sqrt = _unary_op(opspec.SQRT)
rsqrt = _unary_op(opspec.RSQRT)
sin = _unary_op(opspec.SIN)
cos = _unary_op(opspec.COS)
tanh = _unary_op(opspec.TANH)
sigmoid = _unary_op(opspec.SIGMOID)
silu = _unary_op(opspec.SILU)


def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    if approximate not in ("none", "tanh"):
        raise UserError(f"gelu approximate must be 'none' or 'tanh', got {approximate!r}")
    return _unary(opspec.GELU, input, approximate=approximate)


def logical_not(input: Tensor) -> Tensor:
    return apply(opspec.LOGICAL_NOT, (input,), {}, input.shape, dtypes.bool_)


def square(input: Tensor) -> Tensor:
    return mul(input, input)


def reciprocal(x):
    if _amp.state.on:
        return _amp.call("reciprocal", reciprocal, (x,), {})
    return div(1.0, x)


@gradient(opspec.NEG)
def _neg_grad(node, out, g):
    return (neg(g),)


@gradient(opspec.EXP)
def _exp_grad(node, out, g):
    return (mul(g, out),)


@gradient(opspec.LOG)
def _log_grad(node, out, g):
    return (div(g, node.inputs[0]),)


@gradient(opspec.SQRT)
def _sqrt_grad(node, out, g):
    return (div(mul(g, 0.5), out),)


@gradient(opspec.RSQRT)
def _rsqrt_grad(node, out, g):
    return (mul(mul(g, -0.5), mul(out, mul(out, out))),)


@gradient(opspec.ABS)
def _abs_grad(node, out, g):
    return (mul(g, sign(node.inputs[0])),)


@gradient(opspec.SIN)
def _sin_grad(node, out, g):
    return (mul(g, cos(node.inputs[0])),)


@gradient(opspec.COS)
def _cos_grad(node, out, g):
    return (neg(mul(g, sin(node.inputs[0]))),)


@gradient(opspec.TANH)
def _tanh_grad(node, out, g):
    return (mul(g, sub(1.0, mul(out, out))),)


@gradient(opspec.SIGMOID)
def _sigmoid_grad(node, out, g):
    return (mul(g, mul(out, sub(1.0, out))),)


@gradient(opspec.RELU)
def _relu_grad(node, out, g):
    return (mul(g, cast(gt(out, 0), g.dtype)),)


@gradient(opspec.SIGN)
def _sign_grad(node, out, g):
    return (mul(g, 0.0),)


@gradient(opspec.GELU)
def _gelu_grad(node, out, g):
    return (apply(opspec.GELU_BACKWARD, (node.inputs[0], g), node.attrs, g.shape, g.dtype),)


@gradient(opspec.SILU)
def _silu_grad(node, out, g):
    return (apply(opspec.SILU_BACKWARD, (node.inputs[0], g), {}, g.shape, g.dtype),)


# ------------------------------------------------------------------ binary


def _binary(op, a, b):
    a, b = _operands(a, b, op)
    shape = broadcast_shape(a.shape, b.shape, op)
    return apply(op, (a, b), {}, shape, a.dtype)


def _compare(op, a, b):
    a, b = _operands(a, b, op)
    return apply(op, (a, b), {}, broadcast_shape(a.shape, b.shape, op), dtypes.bool_)


def _binary_op(op: str, compute=_binary) -> Callable[[TensorOrNumber, TensorOrNumber], Tensor]:
    """The function of the binary op `op` (mul(a, b), eq(a, b), ...): broadcast, PyTorch's promotion."""

    def function(input: TensorOrNumber, other: TensorOrNumber) -> Tensor:
        return compute(op, input, other)

    if op in AUTOCAST_BINARY:

        def function(input: TensorOrNumber, other: TensorOrNumber) -> Tensor:  # noqa: F811  (autocast's check first)
            if _amp.state.on:
                return _amp.call(op, function, (input, other), {})
            return compute(op, input, other)

    function.__name__ = function.__qualname__ = op
    return function


# comparisons: a bool result
eq = _binary_op(opspec.EQ, _compare)
ne = _binary_op(opspec.NE, _compare)
lt = _binary_op(opspec.LT, _compare)
le = _binary_op(opspec.LE, _compare)
gt = _binary_op(opspec.GT, _compare)
ge = _binary_op(opspec.GE, _compare)
# arithmetic: the promoted dtype (add, sub and div below take more than two tensors)
mul = _binary_op(opspec.MUL)
_pow = _binary_op(opspec.POW)
maximum = _binary_op(opspec.MAXIMUM)
minimum = _binary_op(opspec.MINIMUM)


def pow(input: TensorOrNumber, exponent: TensorOrNumber) -> Tensor:
    return _pow(input, exponent)


def add(input: TensorOrNumber, other: TensorOrNumber, alpha: Number = 1) -> Tensor:
    return _binary(opspec.ADD, input, other if alpha == 1 else mul(other, alpha))


def sub(input: TensorOrNumber, other: TensorOrNumber, alpha: Number = 1) -> Tensor:
    return _binary(opspec.SUB, input, other if alpha == 1 else mul(other, alpha))


def div(a, b):
    a, b = _operands(a, b, "div")
    if not a.dtype.is_floating_point:  # true division, as in PyTorch
        a, b = cast(a, dtypes.default_float), cast(b, dtypes.default_float)
    return apply(opspec.DIV, (a, b), {}, broadcast_shape(a.shape, b.shape, "div"), a.dtype)


def logical_and(input: TensorOrNumber, other: TensorOrNumber) -> Tensor:
    return mul(cast(input, dtypes.bool_), cast(other, dtypes.bool_)).bool()


def logical_or(input: TensorOrNumber, other: TensorOrNumber) -> Tensor:
    return maximum(cast(input, dtypes.bool_), cast(other, dtypes.bool_))


def sum_to(g, shape: tuple):
    """Sum a broadcast gradient back down to `shape` (the inverse of broadcasting). The "sum" node is
    built here directly (its gradient rule lives with the reductions, ops/reduce.py), so that this
    module needs nothing from reduce.py, which builds on it."""
    if g.shape == tuple(shape):
        return g
    extra = len(g.shape) - len(shape)
    axes = tuple(range(extra)) + tuple(i + extra for i, n in enumerate(shape) if n == 1 and g.shape[i + extra] != 1)
    if axes:
        kept = tuple(1 if i in axes else n for i, n in enumerate(g.shape))
        g = apply(opspec.SUM, (g,), {"axes": axes, "keepdim": True}, kept, g.dtype)
    return g.reshape(shape)


# The binary rules build an input's gradient only where that input requires grad (PyTorch's
# needs_input_grad): `x * 0.5` has a constant on one side, whose gradient (a product and a sum)
# would be built for nothing.


@gradient(opspec.ADD)
def _add_grad(node, out, g):
    a, b = node.inputs
    return (sum_to(g, a.shape) if a.requires_grad else None), (sum_to(g, b.shape) if b.requires_grad else None)


@gradient(opspec.SUB)
def _sub_grad(node, out, g):
    a, b = node.inputs
    return (sum_to(g, a.shape) if a.requires_grad else None), (sum_to(neg(g), b.shape) if b.requires_grad else None)


@gradient(opspec.MUL)
def _mul_grad(node, out, g):
    a, b = node.inputs
    grad_a = sum_to(mul(g, b), a.shape) if a.requires_grad else None
    return grad_a, (sum_to(mul(g, a), b.shape) if b.requires_grad else None)


@gradient(opspec.DIV)
def _div_grad(node, out, g):
    a, b = node.inputs
    grad_a = sum_to(div(g, b), a.shape) if a.requires_grad else None
    return grad_a, (sum_to(neg(mul(g, div(out, b))), b.shape) if b.requires_grad else None)


@gradient(opspec.POW)
def _pow_grad(node, out, g):
    a, b = node.inputs
    grad_a = sum_to(mul(g, mul(b, pow(a, sub(b, 1.0)))), a.shape) if a.requires_grad else None
    return grad_a, (sum_to(mul(g, mul(out, log(a))), b.shape) if b.requires_grad else None)


def _minmax_grad(node, g, first_wins):
    a, b = node.inputs
    # Ties split the gradient evenly, as PyTorch does.
    win = cast(first_wins(a, b), g.dtype)
    tie = cast(eq(a, b), g.dtype)
    share_a = add(win, mul(tie, 0.5))
    return sum_to(mul(g, share_a), a.shape), sum_to(mul(g, sub(1.0, share_a)), b.shape)


@gradient(opspec.MAXIMUM)
def _maximum_grad(node, out, g):
    return _minmax_grad(node, g, gt)


@gradient(opspec.MINIMUM)
def _minimum_grad(node, out, g):
    return _minmax_grad(node, g, lt)


# ------------------------------------------------------------------ logaddexp


@opspec.LOGADDEXP.function
def logaddexp(input: Tensor, other: Tensor) -> Tensor:
    """torch.logaddexp: log(exp(input) + exp(other)) elementwise, with broadcasting, without overflow."""
    if not _is_tensor(other):
        raise TypeError(f"logaddexp(): argument 'other' (position 2) must be Tensor, not {type(other).__name__}")
    a, b = _operands(input, other, "logaddexp")
    if not a.dtype.is_floating_point:
        raise NotImplementedError(f'"logaddexp" not implemented for {a.dtype}')
    return apply(opspec.LOGADDEXP, (a, b), {}, broadcast_shape(a.shape, b.shape, "logaddexp"), a.dtype)


@gradient(opspec.LOGADDEXP)
def _logaddexp_grad(node, out, g):
    # PyTorch's rule: g / (1 + exp(other - input)) for input, the mirror for other
    a, b = node.inputs
    grad_a = sum_to(div(g, add(exp(sub(b, a)), 1.0)), a.shape) if a.requires_grad else None
    return grad_a, (sum_to(div(g, add(exp(sub(a, b)), 1.0)), b.shape) if b.requires_grad else None)


@opspec.LOGADDEXP.fallback
def _logaddexp_composite(a, b):
    """max + log(1 + exp(-|a - b|)), in float32 for half inputs. Written so that its gradient is PyTorch's
    rule: each side's difference is taken from the larger one; equal infinities give that infinity
    (and, as in PyTorch, no gradient: NaN)."""
    if a.dtype in (dtypes.float16, dtypes.bfloat16):
        return _logaddexp_composite(a.float(), b.float()).to(a.dtype)
    first = ge(a, b)
    larger = where(first, a, b)
    softplus = log(add(exp(where(first, sub(b, a), sub(a, b))), 1.0))
    same_infinity = logical_and(eq(a, b), eq(abs(a), float("inf")))
    return where(same_infinity, a, add(larger, softplus))


# ------------------------------------------------------------------ where / clamp


def where(condition: Tensor, input: TensorOrNumber, other: TensorOrNumber) -> Tensor:
    if not _is_tensor(condition):
        raise TypeError("where() needs a boolean tensor as its condition")
    ref = input if _is_tensor(input) else other
    if not _is_tensor(ref):
        dtype = (
            dtypes.default_float if builtins.any(isinstance(v, float) for v in (input, other)) else dtypes.default_int
        )
        input, other = scalar(input, dtype, condition.device), scalar(other, dtype, condition.device)
    else:
        input, other = _operands(input, other, "where")
    _check_devices(condition, input, "where")
    shape = broadcast_shape(broadcast_shape(condition.shape, input.shape, "where"), other.shape, "where")
    return apply(opspec.WHERE, (cast(condition, dtypes.bool_), input, other), {}, shape, input.dtype)


@gradient(opspec.WHERE)
def _where_grad(node, out, g):
    c, x, y = node.inputs
    zero = scalar(0, g.dtype, g.device)
    return None, sum_to(where(c, g, zero), x.shape), sum_to(where(c, zero, g), y.shape)


def masked_fill(x: Tensor, mask: Tensor, value: Number) -> Tensor:
    return where(mask, scalar(value, x.dtype, x.device) if not _is_tensor(value) else value, x)


def clamp(input: Tensor, min: TensorOrNumber | None = None, max: TensorOrNumber | None = None) -> Tensor:
    if min is None and max is None:
        raise UserError("clamp needs at least one of min or max")
    # where, not maximum/minimum: an element equal to a bound passes its gradient to x, as in PyTorch
    # (maximum would split it with the bound). A bound gets the gradient where it is the result.
    out = input
    if min is not None:
        if max is not None and _is_tensor(min) and min.requires_grad:
            min = where(lt(min, max), min, min.detach())  # min == max: PyTorch gives min no gradient
        out = where(lt(out, min), min, out)
    if max is not None:
        out = where(gt(out, max), max, out)
    return out


def lerp(input: Tensor, end: Tensor, weight: TensorOrNumber) -> Tensor:
    return add(input, mul(sub(end, input), weight))
