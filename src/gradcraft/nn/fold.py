"""Sliding-window patches, as torch.nn's: F.unfold / F.fold with nn.Unfold / nn.Fold.

unfold is a grouped convolution with one-hot kernels (output channel c * K + k copies kernel position
k of input channel c, PyTorch's order), and fold the matching transposed convolution, which sums the
overlapping patches back: both composed from the convolution ops, so their gradients are each
other's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from gradcraft.errors import RuntimeError_
from gradcraft.nn.module import Module
from gradcraft.ops.creation import tensor
from gradcraft.typing import Shape

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor


def _pair(v) -> tuple:
    return tuple(v) if isinstance(v, (tuple, list)) else (int(v), int(v))


def _one_hot_kernels(channels: int, kernel: tuple, dtype, device):
    k = kernel[0] * kernel[1]
    eye = np.eye(k, dtype=np.float64).reshape(k, 1, kernel[0], kernel[1])
    return tensor(np.tile(eye, (channels, 1, 1, 1)), dtype=dtype, device=device)


def unfold(input: Tensor, kernel_size: Shape, dilation: Shape = 1, padding: Shape = 0, stride: Shape = 1) -> Tensor:
    """(N, C, H, W) -> (N, C * kh * kw, L): every sliding block as a column."""
    from gradcraft.ops.conv import conv2d

    if input.ndim not in (3, 4):
        raise NotImplementedError(f"Input Error: Only 3D or 4D input Tensors are supported (got {input.ndim}D)")
    unbatched = input.ndim == 3
    x = input.unsqueeze(0) if unbatched else input
    kernel = _pair(kernel_size)
    channels = x.shape[1]
    weight = _one_hot_kernels(channels, kernel, x.dtype, x.device)
    cols = conv2d(x, weight, None, _pair(stride), _pair(padding), _pair(dilation), channels)
    cols = cols.reshape(x.shape[0], channels * kernel[0] * kernel[1], -1)
    return cols.squeeze(0) if unbatched else cols


def fold(
    input: Tensor, output_size: Shape, kernel_size: Shape, dilation: Shape = 1, padding: Shape = 0, stride: Shape = 1
) -> Tensor:
    """(N, C * kh * kw, L) -> (N, C, H, W): the columns summed back into place."""
    from gradcraft.ops.conv import conv_transpose2d

    if input.ndim not in (2, 3):
        raise NotImplementedError(
            f"Input Error: Only unbatched (2D) or batched (3D) input Tensors are supported (got {input.ndim}D)"
        )
    unbatched = input.ndim == 2
    x = input.unsqueeze(0) if unbatched else input
    kernel, out, dil, pad, st = _pair(kernel_size), _pair(output_size), _pair(dilation), _pair(padding), _pair(stride)
    k = kernel[0] * kernel[1]
    if x.shape[1] % k:
        raise RuntimeError_(
            f"Expected size of input's dimension 1 to be divisible by the product of kernel_size, but got "
            f"input.size(1)={x.shape[1]} and kernel_size={kernel}"
        )
    blocks = [(out[d] + 2 * pad[d] - dil[d] * (kernel[d] - 1) - 1) // st[d] + 1 for d in range(2)]
    if blocks[0] * blocks[1] != x.shape[2]:
        raise RuntimeError_(
            f"Given output_size={out}, kernel_size={kernel}, dilation={dil}, padding={pad}, stride={st}, expected "
            f"size of input's dimension 2 to match the calculated number of sliding blocks {blocks[0]} * "
            f"{blocks[1]} = {blocks[0] * blocks[1]}, but got input.size(2)={x.shape[2]}."
        )
    channels = x.shape[1] // k
    weight = _one_hot_kernels(channels, kernel, x.dtype, x.device)
    grid = x.reshape(x.shape[0], x.shape[1], blocks[0], blocks[1])
    # output_padding makes up the rows and columns the last block does not reach
    reach = [(blocks[d] - 1) * st[d] - 2 * pad[d] + dil[d] * (kernel[d] - 1) + 1 for d in range(2)]
    result = conv_transpose2d(grid, weight, None, st, pad, tuple(out[d] - reach[d] for d in range(2)), channels, dil)
    return result.squeeze(0) if unbatched else result


class Unfold(Module):
    def __init__(self, kernel_size: Shape, dilation: Shape = 1, padding: Shape = 0, stride: Shape = 1) -> None:
        super().__init__()
        self.kernel_size, self.dilation, self.padding, self.stride = kernel_size, dilation, padding, stride

    def forward(self, input: Tensor) -> Tensor:
        return unfold(input, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, dilation={self.dilation}, padding={self.padding}, stride={self.stride}"


class Fold(Module):
    def __init__(
        self, output_size: Shape, kernel_size: Shape, dilation: Shape = 1, padding: Shape = 0, stride: Shape = 1
    ) -> None:
        super().__init__()
        self.output_size, self.kernel_size = output_size, kernel_size
        self.dilation, self.padding, self.stride = dilation, padding, stride

    def forward(self, input: Tensor) -> Tensor:
        return fold(input, self.output_size, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self) -> str:
        return (
            f"output_size={self.output_size}, kernel_size={self.kernel_size}, dilation={self.dilation}, "
            f"padding={self.padding}, stride={self.stride}"
        )
