"""Reductions (sum, mean, max, min, var, logsumexp, argmax, cumsum, topk) and their gradients."""

from __future__ import annotations

from typing import TYPE_CHECKING
from gradcraft.backend import opspec
from gradcraft.typing import DTypeLike, Dims, TensorOrNumber

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor

import builtins
from collections import namedtuple

from gradcraft import dtypes
from gradcraft.errors import UserError
from gradcraft.ops import elementwise as ew
from gradcraft.ops import rounding
from gradcraft.ops.dims import normalize_axes, normalize_dim  # noqa: F401 (re-exported: ops import them from here)
from gradcraft.ops.function import apply, gradient, no_grad
from gradcraft.amp import policy as _amp

MaxResult = namedtuple("MaxResult", ["values", "indices"])
TopkResult = namedtuple("TopkResult", ["values", "indices"])


def _reduced_shape(shape, axes, keepdim) -> tuple:
    if keepdim:
        return tuple(1 if i in axes else n for i, n in enumerate(shape))
    return tuple(n for i, n in enumerate(shape) if i not in axes)


def _keepdim_shape(shape, axes) -> tuple:
    return tuple(1 if i in axes else n for i, n in enumerate(shape))


def sum(input: Tensor, dim: Dims = None, keepdim: bool = False, dtype: DTypeLike = None) -> Tensor:
    if _amp.state.on:
        return _amp.call("sum", sum, (input, dim, keepdim), {"dtype": dtype})
    if dtype is not None:
        input = ew.cast(input, dtype)
    axes = normalize_axes(dim, input.ndim)
    out_dtype = input.dtype if input.dtype.is_floating_point else dtypes.int64
    return apply(
        opspec.SUM, (input,), {"axes": axes, "keepdim": keepdim}, _reduced_shape(input.shape, axes, keepdim), out_dtype
    )


@gradient(opspec.SUM)
def _sum_grad(node, out, g):
    x = node.inputs[0]
    return (g.reshape(_keepdim_shape(x.shape, node.attrs["axes"])).expand(x.shape),)


def mean(input: Tensor, dim: Dims = None, keepdim: bool = False, dtype: DTypeLike = None) -> Tensor:
    if _amp.state.on:
        return _amp.call("mean", mean, (input, dim, keepdim), {"dtype": dtype})
    if dtype is not None:
        input = ew.cast(input, dtype)
    if not input.dtype.is_floating_point:
        raise UserError(f"mean() needs a floating-point tensor, got {input.dtype.name}; convert with .float()")
    axes = normalize_axes(dim, input.ndim)
    count = 1
    for a in axes:
        count *= input.shape[a]
    return ew.div(sum(input, axes, keepdim), builtins.max(count, 1) if count else float("nan"))


def amax(input: Tensor, dim: Dims = None, keepdim: bool = False) -> Tensor:
    axes = normalize_axes(dim, input.ndim)
    return apply(
        opspec.MAX,
        (input,),
        {"axes": axes, "keepdim": keepdim},
        _reduced_shape(input.shape, axes, keepdim),
        input.dtype,
    )


def amin(input: Tensor, dim: Dims = None, keepdim: bool = False) -> Tensor:
    axes = normalize_axes(dim, input.ndim)
    return apply(
        opspec.MIN,
        (input,),
        {"axes": axes, "keepdim": keepdim},
        _reduced_shape(input.shape, axes, keepdim),
        input.dtype,
    )


def _extreme_grad(node, out, g):
    # Gradient flows to the elements equal to the extreme, shared evenly among ties.
    x = node.inputs[0]
    axes = node.attrs["axes"]
    keep_shape = _keepdim_shape(x.shape, axes)
    hit = ew.cast(ew.eq(x, out.reshape(keep_shape)), g.dtype)
    share = ew.div(hit, sum(hit, axes, keepdim=True))
    return (ew.mul(share, g.reshape(keep_shape)),)


gradient(opspec.MAX)(_extreme_grad)
gradient(opspec.MIN)(_extreme_grad)


def _max_or_min(x, dim, keepdim, of_all, elementwise, arg_of) -> Tensor | tuple[Tensor, Tensor]:
    if dim is None:
        return of_all(x)
    if not isinstance(dim, int):  # torch.max(a, b) is the elementwise maximum
        return elementwise(x, dim)
    indices = arg_of(x, dim, keepdim=True)
    values = take_along_dim(x, indices, dim)
    if not keepdim:
        values, indices = values.squeeze(dim), indices.squeeze(dim)
    return MaxResult(values, indices)


def max(input: Tensor, dim: Dims = None, keepdim: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """Like torch.max: the maximum of all elements, or (values, indices) along `dim`."""
    return _max_or_min(input, dim, keepdim, amax, ew.maximum, argmax)


def min(input: Tensor, dim: Dims = None, keepdim: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """Like torch.min: the minimum of all elements, or (values, indices) along `dim`."""
    return _max_or_min(input, dim, keepdim, amin, ew.minimum, argmin)


def _arg(op, x, dim, keepdim):
    if dim is None:
        shape = (1,) * x.ndim if keepdim else ()
        return apply(op, (x,), {"axis": None, "keepdim": keepdim}, shape, dtypes.int64)
    axis = normalize_dim(dim, x.ndim)
    return apply(op, (x,), {"axis": axis, "keepdim": keepdim}, _reduced_shape(x.shape, (axis,), keepdim), dtypes.int64)


def argmax(input: Tensor, dim: Dims = None, keepdim: bool = False) -> Tensor:
    return _arg(opspec.ARGMAX, input, dim, keepdim)


def argmin(input: Tensor, dim: Dims = None, keepdim: bool = False) -> Tensor:
    return _arg(opspec.ARGMIN, input, dim, keepdim)


def take_along_dim(input, indices, dim=None):
    from gradcraft.ops.movement import take_along_dim as take

    return take(input, indices, dim)


def var(
    input: Tensor,
    dim: Dims = None,
    unbiased: bool | None = None,
    keepdim: bool = False,
    *,
    correction: int | None = None,
) -> Tensor:
    """Variance with Bessel's correction by default (correction=1), as in PyTorch."""
    if _amp.state.on:
        return _amp.call("var", var, (input, dim, unbiased, keepdim), {"correction": correction})
    if correction is None:
        correction = 1 if unbiased is None or unbiased else 0
    axes = normalize_axes(dim, input.ndim)
    count = 1
    for a in axes:
        count *= input.shape[a]
    centered = ew.sub(input, mean(input, axes, keepdim=True))
    return ew.div(sum(ew.mul(centered, centered), axes, keepdim), builtins.max(count - correction, 0))


def std(
    input: Tensor,
    dim: Dims = None,
    unbiased: bool | None = None,
    keepdim: bool = False,
    *,
    correction: int | None = None,
) -> Tensor:
    return ew.sqrt(var(input, dim, unbiased, keepdim, correction=correction))


def logsumexp(input: Tensor, dim: Dims, keepdim: bool = False) -> Tensor:
    if _amp.state.on:
        return _amp.call("logsumexp", logsumexp, (input, dim, keepdim), {})
    axes = normalize_axes(dim, input.ndim)
    with no_grad():  # the shift cancels out of the value and the gradient
        shift = amax(input, axes, keepdim=True).detach()
    shift = ew.where(ew.eq(ew.abs(shift), float("inf")), ew.mul(shift, 0.0), shift)
    out = ew.add(ew.log(sum(ew.exp(ew.sub(input, shift)), axes, keepdim=True)), shift)
    return out if keepdim else out.reshape(_reduced_shape(input.shape, axes, False))


def all(input: Tensor, dim: Dims = None, keepdim: bool = False) -> Tensor:
    return ew.eq(amin(ew.cast(input, dtypes.bool_).to(dtypes.int32), dim, keepdim), 1)


def any(input: Tensor, dim: Dims = None, keepdim: bool = False) -> Tensor:
    return ew.eq(amax(ew.cast(input, dtypes.bool_).to(dtypes.int32), dim, keepdim), 1)


def cumsum(input: Tensor, dim: int, dtype: DTypeLike = None) -> Tensor:
    if _amp.state.on:
        return _amp.call("cumsum", cumsum, (input, dim), {"dtype": dtype})
    if dtype is not None:
        input = ew.cast(input, dtype)
    out_dtype = input.dtype if input.dtype.is_floating_point else dtypes.int64
    return apply(
        opspec.CUMSUM, (input,), {"axis": normalize_dim(dim, input.ndim), "reverse": False}, input.shape, out_dtype
    )


@gradient(opspec.CUMSUM)
def _cumsum_grad(node, out, g):
    attrs = dict(node.attrs, reverse=not node.attrs["reverse"])
    return (apply(opspec.CUMSUM, (g,), attrs, g.shape, g.dtype),)


def topk(input: Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> tuple[Tensor, Tensor]:
    axis = normalize_dim(dim, input.ndim)
    if not 0 <= k <= (input.shape[axis] if input.ndim else 1):
        raise UserError(f"topk: k={k} is out of range for dimension {dim} of size {input.shape[axis]}")
    shape = tuple(k if i == axis else n for i, n in enumerate(input.shape))
    indices = apply(opspec.TOPK, (input,), {"k": k, "axis": axis, "largest": largest}, shape, dtypes.int64)
    return TopkResult(take_along_dim(input, indices, axis), indices)


SortResult = namedtuple("SortResult", ["values", "indices"])


def sort(input: Tensor, dim: int = -1, descending: bool = False, stable: bool = False) -> tuple[Tensor, Tensor]:
    """(values, indices) sorted along dim; equal elements keep their order (a stable sort)."""
    if input.ndim == 0:
        return SortResult(input, ew.cast(ew.mul(input, 0), dtypes.int64))
    axis = normalize_dim(dim, input.ndim)
    values, indices = topk(input, input.shape[axis], axis, largest=descending)
    return SortResult(values, indices)


def argsort(input: Tensor, dim: int = -1, descending: bool = False, stable: bool = False) -> Tensor:
    return sort(input, dim, descending, stable).indices


def prod(input: Tensor, dim: Dims = None, keepdim: bool = False, dtype: DTypeLike = None) -> Tensor:
    """The product, as exp(sum(log|x|)) with the sign and zeros counted apart (floating point)."""
    if _amp.state.on:
        return _amp.call("prod", prod, (input, dim, keepdim), {"dtype": dtype})
    if dtype is not None:
        input = ew.cast(input, dtype)
    if not input.dtype.is_floating_point:
        raise UserError(f"prod() needs a floating-point tensor here, got {input.dtype.name}; convert with .float()")
    magnitude = ew.exp(sum(ew.log(ew.abs(input)), dim, keepdim))
    negatives = sum(ew.cast(ew.lt(input, 0), dtypes.int64), dim, keepdim)
    sign = ew.sub(1.0, ew.mul(ew.cast(rounding.remainder(negatives, 2), input.dtype), 2.0))
    return ew.mul(magnitude, sign)


def _accepts_axis(fn):
    """NumPy's `axis=` and `keepdims=` keywords, which PyTorch's reductions accept as other names for
    `dim` and `keepdim` (makemore's `P.sum(1, keepdims=True)`)."""

    def with_axis(input, *args, axis=None, keepdims=None, **kwargs):
        if axis is not None:
            kwargs["dim"] = axis
        if keepdims is not None:
            kwargs["keepdim"] = keepdims
        return fn(input, *args, **kwargs)

    with_axis.__name__, with_axis.__doc__, with_axis.__wrapped__ = fn.__name__, fn.__doc__, fn
    return with_axis


sum, mean, amax, amin, max, min, argmax, argmin, var, std, logsumexp, all, any, cumsum, prod, sort, argsort = (
    _accepts_axis(f)
    for f in (
        sum,
        mean,
        amax,
        amin,
        max,
        min,
        argmax,
        argmin,
        var,
        std,
        logsumexp,
        all,
        any,
        cumsum,
        prod,
        sort,
        argsort,
    )
)


def allclose(
    input: TensorOrNumber, other: TensorOrNumber, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False
) -> bool:
    return bool(all(rounding.isclose(input, other, rtol, atol, equal_nan)).item())


def equal(input: TensorOrNumber, other: TensorOrNumber) -> bool:
    """True when a and b have the same shape and elements (torch.equal)."""
    if tuple(input.shape) != tuple(other.shape):
        return False
    return bool(all(ew.eq(input, other)).item())
