"""The padding layers of torch.nn: ReflectionPad, ReplicationPad, CircularPad, ZeroPad and ConstantPad
in 1, 2 and 3 dimensions, each an F.pad with its `padding` (an int for every side, or a tuple
(left, right[, top, bottom[, front, back]]))."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gradcraft.errors import ValueError_
from gradcraft.nn.module import Module
from gradcraft.ops.pad_modes import pad

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor


def _widths(padding, dims: int) -> tuple:
    if isinstance(padding, int):
        return (padding,) * (2 * dims)
    padding = tuple(int(p) for p in padding)
    if len(padding) != 2 * dims:
        raise ValueError_(f"expected a padding of {2 * dims} values (or one int), got {padding}")
    return padding


class _PadNd(Module):
    _mode = "constant"
    _dims = 1

    def __init__(self, padding) -> None:
        super().__init__()
        self.padding = _widths(padding, self._dims)

    def forward(self, input: Tensor) -> Tensor:
        return pad(input, self.padding, self._mode)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class ReflectionPad1d(_PadNd):
    _mode, _dims = "reflect", 1


class ReflectionPad2d(_PadNd):
    _mode, _dims = "reflect", 2


class ReflectionPad3d(_PadNd):
    _mode, _dims = "reflect", 3


class ReplicationPad1d(_PadNd):
    _mode, _dims = "replicate", 1


class ReplicationPad2d(_PadNd):
    _mode, _dims = "replicate", 2


class ReplicationPad3d(_PadNd):
    _mode, _dims = "replicate", 3


class CircularPad1d(_PadNd):
    _mode, _dims = "circular", 1


class CircularPad2d(_PadNd):
    _mode, _dims = "circular", 2


class CircularPad3d(_PadNd):
    _mode, _dims = "circular", 3


class _ConstantPadNd(_PadNd):
    def __init__(self, padding, value: float) -> None:
        super().__init__(padding)
        self.value = value

    def forward(self, input: Tensor) -> Tensor:
        return pad(input, self.padding, "constant", self.value)

    def extra_repr(self) -> str:
        return f"padding={self.padding}, value={self.value}"


class ConstantPad1d(_ConstantPadNd):
    _dims = 1


class ConstantPad2d(_ConstantPadNd):
    _dims = 2


class ConstantPad3d(_ConstantPadNd):
    _dims = 3


class _ZeroPad(_ConstantPadNd):
    def __init__(self, padding) -> None:
        super().__init__(padding, 0.0)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class ZeroPad1d(_ZeroPad):
    _dims = 1


class ZeroPad2d(_ZeroPad):
    _dims = 2


class ZeroPad3d(_ZeroPad):
    _dims = 3
