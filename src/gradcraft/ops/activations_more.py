"""More of torch.nn.functional's activations, composed from elementwise ops: relu6, hardtanh,
hardsigmoid, hardswish, mish, softsign, logsigmoid, softmin, selu, celu, tanhshrink, softshrink,
hardshrink and threshold, with PyTorch's values and its gradients at the kinks (zero at the ends of
hardtanh's range, hardswish's x/3 + 1/2 inside (-3, 3))."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

from gradcraft.errors import RuntimeError_
from gradcraft.ops import elementwise as ew
from gradcraft.ops.log1p import log1p
from gradcraft.ops.losses import elu, softplus
from gradcraft.typing import DTypeLike

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor

_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def _inplace(input, compute, inplace: bool):
    """compute(input), or with inplace=True written into input. The value is then computed from a
    copy of input when autograd records it, so the ops that keep input for their gradient keep the
    copy, which the write does not change."""
    if not inplace:
        return compute(input)
    from gradcraft.ops.inplace import write

    return write(input, compute(input.clone() if input.requires_grad else input))


def _hardtanh(x, min_val, max_val):
    inside = ew.logical_and(ew.gt(x, min_val), ew.lt(x, max_val))
    # the clamped ends carry no gradient (PyTorch's hardtanh_backward), the inside passes it
    return ew.where(inside, x, ew.clamp(x, min_val, max_val).detach())


def hardtanh(input: Tensor, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False) -> Tensor:
    if min_val > max_val:
        raise ValueError("min_val cannot be greater than max_val")
    return _inplace(input, lambda x: _hardtanh(x, min_val, max_val), inplace)


def relu6(input: Tensor, inplace: bool = False) -> Tensor:
    return hardtanh(input, 0.0, 6.0, inplace)


def _hardsigmoid(x):
    inside = ew.logical_and(ew.gt(x, -3.0), ew.lt(x, 3.0))
    line = x / 6.0 + 0.5
    return ew.where(inside, line, ew.clamp(line, 0.0, 1.0).detach())


def hardsigmoid(input: Tensor, inplace: bool = False) -> Tensor:
    return _inplace(input, _hardsigmoid, inplace)


def _hardswish(x):
    middle = x * (x + 3.0) / 6.0  # its gradient x/3 + 1/2 inside (-3, 3), as PyTorch's
    return ew.where(ew.le(x, -3.0), 0.0, ew.where(ew.lt(x, 3.0), middle, x))


def hardswish(input: Tensor, inplace: bool = False) -> Tensor:
    return _inplace(input, _hardswish, inplace)


def mish(input: Tensor, inplace: bool = False) -> Tensor:
    return _inplace(input, lambda x: x * ew.tanh(softplus(x)), inplace)


def softsign(input: Tensor) -> Tensor:
    return input / (ew.abs(input) + 1.0)


def logsigmoid(input: Tensor) -> Tensor:
    """min(x, 0) - log1p(exp(-|x|)), stable for large |x|."""
    negative_part = ew.where(ew.lt(input, 0.0), input, 0.0)
    value = negative_part - log1p(ew.exp(ew.neg(ew.abs(input))))
    if not input.requires_grad:
        return value
    # its gradient sigmoid(-x), smooth through x = 0 where the kinks of min and abs meet
    return value.detach() + (input - input.detach()) * ew.sigmoid(ew.neg(input)).detach()


def _implicit_dim(ndim: int) -> int:
    warnings.warn(
        "Implicit dimension choice for softmin has been deprecated. Change the call to include dim=X as an argument.",
        stacklevel=3,
    )
    return 0 if ndim in (0, 1, 3) else 1


def softmin(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype: DTypeLike = None) -> Tensor:
    from gradcraft.ops.nn import softmax

    if dim is None:
        dim = _implicit_dim(input.ndim)
    x = input.to(dtype) if dtype is not None else input
    return softmax(ew.neg(x), dim)


def selu(input: Tensor, inplace: bool = False) -> Tensor:
    return _inplace(input, lambda x: elu(x, _SELU_ALPHA) * _SELU_SCALE, inplace)


def celu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    if alpha == 0:
        raise RuntimeError_("ZeroDivisionError")
    return _inplace(input, lambda x: elu(x / alpha, 1.0) * alpha, inplace)


def tanhshrink(input: Tensor) -> Tensor:
    return input - ew.tanh(input)


def softshrink(input: Tensor, lambd: float = 0.5) -> Tensor:
    if lambd < 0:
        raise RuntimeError_(f"lambda must be greater or equal to 0, but found to be {lambd}.")
    return ew.where(ew.gt(input, lambd), input - lambd, ew.where(ew.lt(input, -lambd), input + lambd, 0.0))


def hardshrink(input: Tensor, lambd: float = 0.5) -> Tensor:
    keep = ew.logical_or(ew.gt(input, lambd), ew.lt(input, -lambd))
    return ew.where(keep, input, 0.0)


def threshold(input: Tensor, threshold: float, value: float, inplace: bool = False) -> Tensor:
    return _inplace(input, lambda x: ew.where(ew.gt(x, threshold), x, value), inplace)
