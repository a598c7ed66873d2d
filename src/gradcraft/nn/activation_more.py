"""More activation modules of torch.nn (ReLU6, Hardtanh, Hardsigmoid, Hardswish, Mish, Softsign,
LogSigmoid, Softmin, SELU, CELU, Tanhshrink, Softshrink, Hardshrink, Threshold), each a thin Module
around its function in gradcraft/ops/activations_more.py, printed as PyTorch prints it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gradcraft.nn.activation import _Activation
from gradcraft.nn.module import Module
from gradcraft.ops import activations_more as A

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor


class Hardtanh(Module):
    def __init__(
        self,
        min_val: float = -1.0,
        max_val: float = 1.0,
        inplace: bool = False,
        min_value: float | None = None,
        max_value: float | None = None,
    ) -> None:
        super().__init__()
        if min_value is not None:
            min_val = min_value  # (deprecated names, as PyTorch)
        if max_value is not None:
            max_val = max_value
        if max_val <= min_val:
            raise AssertionError("max_val must be greater than min_val")
        self.min_val, self.max_val, self.inplace = min_val, max_val, inplace

    def forward(self, input: Tensor) -> Tensor:
        return A.hardtanh(input, self.min_val, self.max_val, self.inplace)

    def extra_repr(self) -> str:
        inplace = ", inplace=True" if self.inplace else ""
        return f"min_val={self.min_val}, max_val={self.max_val}{inplace}"


class ReLU6(_Activation):
    def __init__(self, inplace: bool = False) -> None:
        super().__init__(inplace)

    def forward(self, input: Tensor) -> Tensor:
        return A.relu6(input, self.inplace)


class Hardsigmoid(_Activation):
    def __init__(self, inplace: bool = False) -> None:
        super().__init__(inplace)

    def forward(self, input: Tensor) -> Tensor:
        return A.hardsigmoid(input, self.inplace)

    def extra_repr(self) -> str:
        return ""  # PyTorch's repr does not show inplace here


class Hardswish(_Activation):
    def __init__(self, inplace: bool = False) -> None:
        super().__init__(inplace)

    def forward(self, input: Tensor) -> Tensor:
        return A.hardswish(input, self.inplace)

    def extra_repr(self) -> str:
        return ""  # PyTorch's repr does not show inplace here


class Mish(_Activation):
    def __init__(self, inplace: bool = False) -> None:
        super().__init__(inplace)

    def forward(self, input: Tensor) -> Tensor:
        return A.mish(input, self.inplace)


class SELU(_Activation):
    def __init__(self, inplace: bool = False) -> None:
        super().__init__(inplace)

    def forward(self, input: Tensor) -> Tensor:
        return A.selu(input, self.inplace)


class CELU(_Activation):
    def __init__(self, alpha: float = 1.0, inplace: bool = False) -> None:
        super().__init__(inplace, alpha=alpha)

    def forward(self, input: Tensor) -> Tensor:
        return A.celu(input, self.alpha, self.inplace)


class Threshold(_Activation):
    def __init__(self, threshold: float, value: float, inplace: bool = False) -> None:
        super().__init__(inplace, threshold=threshold, value=value)

    def forward(self, input: Tensor) -> Tensor:
        return A.threshold(input, self.threshold, self.value, self.inplace)


class Softsign(Module):
    def forward(self, input: Tensor) -> Tensor:
        return A.softsign(input)


class LogSigmoid(Module):
    def forward(self, input: Tensor) -> Tensor:
        return A.logsigmoid(input)


class Tanhshrink(Module):
    def forward(self, input: Tensor) -> Tensor:
        return A.tanhshrink(input)


class Softmin(Module):
    def __init__(self, dim: int | None = None) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, input: Tensor) -> Tensor:
        return A.softmin(input, self.dim, _stacklevel=5)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class Softshrink(Module):
    def __init__(self, lambd: float = 0.5) -> None:
        super().__init__()
        self.lambd = lambd

    def forward(self, input: Tensor) -> Tensor:
        return A.softshrink(input, self.lambd)

    def extra_repr(self) -> str:
        return str(self.lambd)


class Hardshrink(Softshrink):
    def forward(self, input: Tensor) -> Tensor:
        return A.hardshrink(input, self.lambd)
