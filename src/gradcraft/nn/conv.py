"""Convolution modules, as in torch.nn: Conv1d, Conv2d, ConvTranspose1d, ConvTranspose2d. Their
parameters, initialisation (kaiming-uniform with a = sqrt(5), the bias uniform in +-1/sqrt(fan_in))
and state_dict keys are PyTorch's; Conv1d/2d take every padding_mode ('zeros', 'reflect',
'replicate', 'circular'), the transposed ones 'zeros' only, as PyTorch."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from gradcraft.errors import ValueError_
from gradcraft.nn import functional as F
from gradcraft.nn import init
from gradcraft.nn.module import Module, Parameter
from gradcraft.ops.conv import ntuple, pad_spatial
from gradcraft.ops.creation import zeros
from gradcraft.typing import DTypeLike, Device, Shape

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor


class _ConvNd(Module):
    _spatial = 2
    transposed = False

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: Shape,
        stride: Shape = 1,
        padding: Shape | str = 0,
        dilation: Shape = 1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
        device: Device = None,
        dtype: DTypeLike = None,
        output_padding: Shape = 0,
    ) -> None:
        super().__init__()
        n = self._spatial
        if groups <= 0:
            raise ValueError_("groups must be a positive integer")
        if in_channels % groups:
            raise ValueError_("in_channels must be divisible by groups")
        if out_channels % groups:
            raise ValueError_("out_channels must be divisible by groups")
        if padding_mode not in ("zeros", "reflect", "replicate", "circular"):
            raise ValueError_(
                f"padding_mode must be one of ['zeros', 'reflect', 'replicate', 'circular'], but got "
                f"padding_mode='{padding_mode}'"
            )
        if padding_mode != "zeros" and self.transposed:
            raise ValueError_(f'Only "zeros" padding mode is supported for {type(self).__name__}')
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = ntuple(kernel_size, n, "kernel_size")
        self.stride = ntuple(stride, n, "stride")
        if isinstance(padding, str):
            if padding not in ("same", "valid"):
                raise ValueError_(f"Invalid padding string {padding!r}, should be one of {{'valid', 'same'}}")
            if padding == "same" and any(s != 1 for s in self.stride):
                raise ValueError_("padding='same' is not supported for strided convolutions")
            self.padding = padding
        else:
            self.padding = ntuple(padding, n, "padding")
        self.dilation = ntuple(dilation, n, "dilation")
        self.output_padding = ntuple(output_padding, n, "output_padding")
        self.groups, self.padding_mode = groups, padding_mode
        if self.transposed:
            shape = (in_channels, out_channels // groups, *self.kernel_size)
        else:
            shape = (out_channels, in_channels // groups, *self.kernel_size)
        self.weight = Parameter(zeros(shape, device=device, dtype=dtype))
        self.bias = Parameter(zeros(out_channels, device=device, dtype=dtype)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = self.weight.shape[1] * math.prod(self.weight.shape[2:])
            if fan_in:
                bound = 1 / math.sqrt(fan_in)
                init.uniform_(self.bias, -bound, bound)

    def _conv_input(self, input: Tensor) -> tuple:
        """The input and the padding to give the functional op: a padding mode other than 'zeros' pads
        the input itself (PyTorch's order: the mode's padding, then an unpadded convolution)."""
        if self.padding_mode == "zeros":
            return input, self.padding
        if self.padding == "valid":
            return input, 0
        if self.padding == "same":
            totals = [d * (k - 1) for d, k in zip(self.dilation, self.kernel_size)]
            pads = [(t // 2, t - t // 2) for t in totals]
        else:
            pads = [(p, p) for p in self.padding]
        return pad_spatial(input, pads, self.padding_mode), 0

    def extra_repr(self) -> str:
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0,) * self._spatial:
            s += f", padding={self.padding}"
        if self.dilation != (1,) * self._spatial:
            s += f", dilation={self.dilation}"
        if self.output_padding != (0,) * self._spatial:
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s


class Conv1d(_ConvNd):
    _spatial = 1

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: Shape,
        stride: Shape = 1,
        padding: Shape | str = 0,
        dilation: Shape = 1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
        device: Device = None,
        dtype: DTypeLike = None,
    ) -> None:
        super().__init__(
            in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias, padding_mode, device, dtype
        )

    def forward(self, input: Tensor) -> Tensor:
        x, padding = self._conv_input(input)
        return F.conv1d(x, self.weight, self.bias, self.stride, padding, self.dilation, self.groups)


class Conv2d(_ConvNd):
    _spatial = 2

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: Shape,
        stride: Shape = 1,
        padding: Shape | str = 0,
        dilation: Shape = 1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
        device: Device = None,
        dtype: DTypeLike = None,
    ) -> None:
        super().__init__(
            in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias, padding_mode, device, dtype
        )

    def forward(self, input: Tensor) -> Tensor:
        x, padding = self._conv_input(input)
        return F.conv2d(x, self.weight, self.bias, self.stride, padding, self.dilation, self.groups)


class _ConvTransposeNd(_ConvNd):
    transposed = True

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: Shape,
        stride: Shape = 1,
        padding: Shape = 0,
        output_padding: Shape = 0,
        groups: int = 1,
        bias: bool = True,
        dilation: Shape = 1,
        padding_mode: str = "zeros",
        device: Device = None,
        dtype: DTypeLike = None,
    ) -> None:
        if isinstance(padding, str):
            raise ValueError_(f"padding={padding!r} is not supported by {type(self).__name__}")
        super().__init__(
            in_channels,
            out_channels,
            kernel_size,
            stride,
            padding,
            dilation,
            groups,
            bias,
            padding_mode,
            device,
            dtype,
            output_padding,
        )

    def _output_padding(self, input: Tensor, output_size: Shape | None) -> tuple:
        """The output padding that gives `output_size` (PyTorch's forward argument), else the module's."""
        if output_size is None:
            return self.output_padding
        n = self._spatial
        output_size = tuple(output_size)[-n:]
        extra = []
        for d in range(n):
            smallest = (
                (input.shape[-n + d] - 1) * self.stride[d]
                - 2 * self.padding[d]
                + self.dilation[d] * (self.kernel_size[d] - 1)
                + 1
            )
            if not smallest <= output_size[d] < smallest + self.stride[d]:
                raise ValueError_(
                    f"requested an output size of {output_size}, but valid sizes range from {smallest} to "
                    f"{smallest + self.stride[d] - 1} (for an input of {tuple(input.shape[-n:])})"
                )
            extra.append(output_size[d] - smallest)
        return tuple(extra)


class ConvTranspose1d(_ConvTransposeNd):
    _spatial = 1

    def forward(self, input: Tensor, output_size: Shape | None = None) -> Tensor:
        output_padding = self._output_padding(input, output_size)
        return F.conv_transpose1d(
            input, self.weight, self.bias, self.stride, self.padding, output_padding, self.groups, self.dilation
        )


class ConvTranspose2d(_ConvTransposeNd):
    _spatial = 2

    def forward(self, input: Tensor, output_size: Shape | None = None) -> Tensor:
        output_padding = self._output_padding(input, output_size)
        return F.conv_transpose2d(
            input, self.weight, self.bias, self.stride, self.padding, output_padding, self.groups, self.dilation
        )
