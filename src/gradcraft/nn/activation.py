"""Activation and shape modules, as in torch.nn: each a thin Module around a functional op."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TYPE_CHECKING

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor

from gradcraft.nn import functional as F
from gradcraft.nn.module import Module


class Identity(Module):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()

    def forward(self, input: Tensor) -> Any:
        return input


class _Activation(Module):
    """An activation module: its function's settings (named as in torch.nn) and, where torch has it,
    the inplace flag; its repr lists the settings, and inplace when set."""

    def __init__(self, inplace: bool | None = False, **settings: float) -> None:
        super().__init__()
        self._settings = tuple(settings)
        for name, value in settings.items():
            setattr(self, name, value)
        if inplace is not None:  # None: torch's module has no inplace flag
            self.inplace = inplace

    def extra_repr(self) -> str:
        shown = [f"{name}={getattr(self, name)}" for name in self._settings]
        return ", ".join(shown + (["inplace=True"] if getattr(self, "inplace", False) else []))


class ReLU(_Activation):
    def __init__(self, inplace: bool = False) -> None:
        super().__init__(inplace)

    def forward(self, input: Tensor) -> Tensor:
        return F.relu(input, inplace=self.inplace)


class GELU(Module):
    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        self.approximate = approximate

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"

    def forward(self, input: Tensor) -> Tensor:
        return F.gelu(input, approximate=self.approximate)


class SiLU(_Activation):
    def __init__(self, inplace: bool = False) -> None:
        super().__init__(inplace)

    def forward(self, input: Tensor) -> Tensor:
        return input.copy_(F.silu(input)) if self.inplace else F.silu(input)


class Tanh(Module):
    def forward(self, input: Tensor) -> Tensor:
        return input.tanh()


class Sigmoid(Module):
    def forward(self, input: Tensor) -> Tensor:
        return input.sigmoid()


class LeakyReLU(_Activation):
    def __init__(self, negative_slope: float = 0.01, inplace: bool = False) -> None:
        super().__init__(inplace, negative_slope=negative_slope)

    def forward(self, input: Tensor) -> Tensor:
        return F.leaky_relu(input, self.negative_slope, inplace=self.inplace)


class ELU(_Activation):
    def __init__(self, alpha: float = 1.0, inplace: bool = False) -> None:
        super().__init__(inplace, alpha=alpha)

    def forward(self, input: Tensor) -> Tensor:
        return F.elu(input, self.alpha, inplace=self.inplace)


class Softplus(_Activation):
    def __init__(self, beta: float = 1.0, threshold: float = 20.0) -> None:
        super().__init__(None, beta=beta, threshold=threshold)

    def forward(self, input: Tensor) -> Tensor:
        return F.softplus(input, self.beta, self.threshold)


class Softmax(Module):
    def __init__(self, dim: int | None = None) -> None:
        super().__init__()
        self.dim = dim

    def extra_repr(self) -> str:
        return f"dim={self.dim}"

    def forward(self, input: Tensor) -> Tensor:
        return F.softmax(input, dim=self.dim if self.dim is not None else -1)


class LogSoftmax(Softmax):
    def forward(self, input: Tensor) -> Tensor:
        return F.log_softmax(input, dim=self.dim if self.dim is not None else -1)


class Flatten(Module):
    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"

    def forward(self, input: Tensor) -> Tensor:
        return input.flatten(self.start_dim, self.end_dim)


class Unflatten(Module):
    def __init__(self, dim: int, unflattened_size: Sequence[int]) -> None:
        super().__init__()
        self.dim, self.unflattened_size = dim, tuple(unflattened_size)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"

    def forward(self, input: Tensor) -> Tensor:
        return input.unflatten(self.dim, self.unflattened_size)
