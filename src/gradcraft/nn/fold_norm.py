"""Sliding-window patches and per-instance normalisation, as torch.nn's: F.unfold / F.fold with
nn.Unfold / nn.Fold, and F.instance_norm with nn.InstanceNorm1d / InstanceNorm2d.

unfold is a grouped convolution with one-hot kernels (output channel c * K + k copies kernel position
k of input channel c, PyTorch's order), and fold the matching transposed convolution, which sums the
overlapping patches back: both composed from the convolution ops, so their gradients are each
other's. instance_norm normalises each (sample, channel) over its spatial positions; with running
statistics it updates them with the batch's average of the per-instance mean and unbiased variance,
as PyTorch's (which runs batch_norm over a (1, N * C, ...) view).
"""

from __future__ import annotations

import numpy as np

from gradcraft.errors import RuntimeError_, ValueError_
from gradcraft.nn.module import Module, Parameter
from gradcraft.ops.creation import ones, tensor, zeros
from gradcraft.ops.function import no_grad


def _pair(v) -> tuple:
    return tuple(v) if isinstance(v, (tuple, list)) else (int(v), int(v))


def _one_hot_kernels(channels: int, kernel: tuple, dtype, device):
    k = kernel[0] * kernel[1]
    eye = np.eye(k, dtype=np.float64).reshape(k, 1, kernel[0], kernel[1])
    return tensor(np.tile(eye, (channels, 1, 1, 1)), dtype=dtype, device=device)


def unfold(input, kernel_size, dilation=1, padding=0, stride=1):
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


def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1):
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
    def __init__(self, kernel_size, dilation=1, padding=0, stride=1) -> None:
        super().__init__()
        self.kernel_size, self.dilation, self.padding, self.stride = kernel_size, dilation, padding, stride

    def forward(self, input):
        return unfold(input, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, dilation={self.dilation}, padding={self.padding}, stride={self.stride}"


class Fold(Module):
    def __init__(self, output_size, kernel_size, dilation=1, padding=0, stride=1) -> None:
        super().__init__()
        self.output_size, self.kernel_size = output_size, kernel_size
        self.dilation, self.padding, self.stride = dilation, padding, stride

    def forward(self, input):
        return fold(input, self.output_size, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self) -> str:
        return (
            f"output_size={self.output_size}, kernel_size={self.kernel_size}, dilation={self.dilation}, "
            f"padding={self.padding}, stride={self.stride}"
        )


def instance_norm(
    input,
    running_mean=None,
    running_var=None,
    weight=None,
    bias=None,
    use_input_stats: bool = True,
    momentum: float = 0.1,
    eps: float = 1e-5,
):
    axes = tuple(range(2, input.ndim))
    if not axes:
        raise ValueError_(f"Expected more than 1 spatial element when training, got input size {list(input.shape)}")
    shape = (1, -1) + (1,) * len(axes)
    if use_input_stats:
        count = int(np.prod([input.shape[a] for a in axes]))
        if count <= 1:
            raise ValueError_(f"Expected more than 1 spatial element when training, got input size {list(input.shape)}")
        mean = input.mean(axes, keepdim=True)
        var = ((input - mean) ** 2).mean(axes, keepdim=True)
        if running_mean is not None and running_var is not None:
            with no_grad():
                batch_mean = mean.detach().reshape(input.shape[0], -1).mean(0)
                batch_var = (var.detach() * (count / (count - 1))).reshape(input.shape[0], -1).mean(0)
                running_mean.mul_(1 - momentum).add_(batch_mean * momentum)
                running_var.mul_(1 - momentum).add_(batch_var * momentum)
    else:
        if running_mean is None or running_var is None:
            raise RuntimeError_("Expected running_mean and running_var to be defined when use_input_stats is false")
        mean, var = running_mean.reshape(shape), running_var.reshape(shape)
    out = (input - mean) / (var + eps).sqrt()
    if weight is not None:
        out = out * weight.reshape(shape)
    if bias is not None:
        out = out + bias.reshape(shape)
    return out


class _InstanceNorm(Module):
    spatial = 1

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float = 0.1,
        affine: bool = False,
        track_running_stats: bool = False,
        device=None,
        dtype=None,
        *,
        bias: bool = True,
    ) -> None:
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        self.weight = Parameter(ones(num_features, device=device, dtype=dtype)) if affine else None
        self.bias = Parameter(zeros(num_features, device=device, dtype=dtype)) if affine and bias else None
        if track_running_stats:
            self.register_buffer("running_mean", zeros(num_features, device=device, dtype=dtype))
            self.register_buffer("running_var", ones(num_features, device=device, dtype=dtype))
            self.register_buffer("num_batches_tracked", tensor(0, device=device))
        else:
            self.running_mean = self.running_var = None

    def forward(self, input):
        expected = self.spatial + 2
        if input.ndim not in (expected - 1, expected):
            raise ValueError_(f"expected {expected - 1}D or {expected}D input (got {input.ndim}D input)")
        unbatched = input.ndim == expected - 1
        x = input.unsqueeze(0) if unbatched else input
        use_input_stats = self.training or not self.track_running_stats
        # (num_batches_tracked stays 0, as PyTorch's instance norm leaves it)
        out = instance_norm(
            x, self.running_mean, self.running_var, self.weight, self.bias, use_input_stats, self.momentum, self.eps
        )
        return out.squeeze(0) if unbatched else out

    def extra_repr(self) -> str:
        return (
            f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
            f"bias={self.bias is not None}, track_running_stats={self.track_running_stats}"
        )


class InstanceNorm1d(_InstanceNorm):
    spatial = 1


class InstanceNorm2d(_InstanceNorm):
    spatial = 2
