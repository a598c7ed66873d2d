"""Convolutions (F.conv1d/2d, F.conv_transpose1d/2d) composed from slicing, stacking and one batched
matmul, no kernels of their own: im2col takes one strided slice of the padded input per kernel
position, so the graph grows with the kernel's size, never with the image's. Gradients are those of
the ops they are made of (slices scatter back, the matmul's gradient is two matmuls).

A transposed convolution is the convolution of the input spread out by the stride (zeros between its
elements) with the kernel flipped and its channel axes swapped: the gradient of a convolution with
respect to its input, written as a forward op."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor

from gradcraft.errors import RuntimeError_, ValueError_
from gradcraft.typing import Shape
from gradcraft.ops import creation
from gradcraft.ops import movement as mv


def ntuple(value, n: int, name: str) -> tuple:
    """An int or a sequence of n ints, as PyTorch's conv and pooling arguments are given."""
    if isinstance(value, (tuple, list)):
        if len(value) == 1:
            return tuple(int(v) for v in value) * n
        if len(value) != n:
            raise RuntimeError_(f"expected {name} to be a single integer value or a list of {n} values")
        return tuple(int(v) for v in value)
    return (int(value),) * n


def batched(x: Tensor, spatial: int, op: str) -> tuple[Tensor, bool]:
    """x with a batch dimension (PyTorch accepts one unbatched sample), and whether one was added."""
    if x.ndim == spatial + 1:
        return x.unsqueeze(0), True
    if x.ndim != spatial + 2:
        raise RuntimeError_(
            f"{op}: expected a {spatial + 1}-D (unbatched) or {spatial + 2}-D (batched) input, got shape {x.shape}"
        )
    return x, False


def windows(x: Tensor, kernel: tuple, stride: tuple, dilation: tuple, out: tuple) -> Tensor:
    """(N, C, *spatial) -> (N, C, K, *out): for each kernel position (row-major), the strided slice of
    x it reads at every output position. x is already padded."""
    spatial = len(kernel)
    slices = []
    for position in _positions(kernel):
        index = [slice(None), slice(None)]
        for d in range(spatial):
            start = position[d] * dilation[d]
            index.append(slice(start, start + stride[d] * (out[d] - 1) + 1, stride[d]))
        slices.append(x[tuple(index)])
    return mv.stack(slices, 2)


def pad_spatial(x: Tensor, pads: list, mode: str) -> Tensor:
    """x padded by pads[d] = (left, right) along spatial dimension d (after batch and channels) in
    one of the convolutions' padding modes: 'zeros', 'reflect', 'replicate' or 'circular', built
    from slices, flips and concatenation."""
    if mode == "zeros":
        return mv.pad(x, [p for pair in reversed(pads) for p in pair]) if any(p for pair in pads for p in pair) else x
    for d, (left, right) in enumerate(pads):
        axis = x.ndim - len(pads) + d
        n = x.shape[axis]
        if mode == "reflect" and max(left, right) >= n:
            raise RuntimeError_(
                f"Argument #4: Padding size should be less than the corresponding input dimension, but got: "
                f"padding ({left}, {right}) at dimension {axis} of input {list(x.shape)}"
            )
        if mode == "circular" and max(left, right) > n:
            raise RuntimeError_("Padding value causes wrapping around more than once.")
        parts = []
        if left:
            if mode == "reflect":
                parts.append(mv.narrow(x, axis, 1, left).flip(axis))
            elif mode == "replicate":
                parts.append(mv.repeat_interleave(mv.narrow(x, axis, 0, 1), left, axis))
            else:
                parts.append(mv.narrow(x, axis, n - left, left))
        parts.append(x)
        if right:
            if mode == "reflect":
                parts.append(mv.narrow(x, axis, n - 1 - right, right).flip(axis))
            elif mode == "replicate":
                parts.append(mv.repeat_interleave(mv.narrow(x, axis, n - 1, 1), right, axis))
            else:
                parts.append(mv.narrow(x, axis, 0, right))
        x = mv.cat(parts, axis) if len(parts) > 1 else x
    return x


def _positions(kernel: tuple) -> list:
    positions = [()]
    for k in kernel:
        positions = [p + (i,) for p in positions for i in range(k)]
    return positions


def _conv(input, weight, bias, stride, padding, dilation, groups, spatial: int, op: str):
    x, unbatched = batched(input, spatial, op)
    if weight.ndim != spatial + 2:
        raise RuntimeError_(f"{op}: expected a {spatial + 2}-D weight, got shape {weight.shape}")
    n, c = x.shape[:2]
    out_channels, group_in = weight.shape[:2]
    kernel = weight.shape[2:]
    if groups < 1 or c != group_in * groups or out_channels % groups:
        raise RuntimeError_(
            f"{op}: weight of shape {weight.shape} with groups={groups} expects {group_in * groups} input channels "
            f"(and out channels divisible by groups), got input of shape {tuple(input.shape)}"
        )
    stride, dilation = ntuple(stride, spatial, "stride"), ntuple(dilation, spatial, "dilation")
    if isinstance(padding, str):
        if padding == "valid":
            pads = [(0, 0)] * spatial
        elif padding == "same":
            if any(s != 1 for s in stride):
                raise ValueError_("padding='same' is not supported for strided convolutions")
            totals = [dilation[d] * (kernel[d] - 1) for d in range(spatial)]
            pads = [(t // 2, t - t // 2) for t in totals]  # the odd one out on the right, as PyTorch
        else:
            raise ValueError_(f"Invalid padding string {padding!r}, should be one of {{'valid', 'same'}}")
    else:
        pads = [(p, p) for p in ntuple(padding, spatial, "padding")]
    if any(p < 0 for pair in pads for p in pair):
        raise RuntimeError_(f"{op}: negative padding is not supported")
    if any(pair != (0, 0) for pair in pads):
        x = mv.pad(x, [p for pair in reversed(pads) for p in pair])
    out = []
    for d in range(spatial):
        span = x.shape[2 + d] - dilation[d] * (kernel[d] - 1)
        if span < 1:
            raise RuntimeError_(
                f"{op}: the kernel ({kernel[d]}, dilation {dilation[d]}) is larger than the padded input "
                f"({x.shape[2 + d]}) in spatial dimension {d}"
            )
        out.append((span - 1) // stride[d] + 1)
    k = math.prod(kernel)
    if weight.dtype != x.dtype:
        raise RuntimeError_(f"{op}: input ({x.dtype}) and weight ({weight.dtype}) must have the same dtype")
    cols = windows(x, kernel, stride, dilation, tuple(out))  # (N, C, K, *out)
    cols = cols.reshape(n, groups, group_in * k, math.prod(out))
    w = weight.reshape(1, groups, out_channels // groups, group_in * k)
    y = (w @ cols).reshape(n, out_channels, *out)
    if bias is not None:
        y = y + bias.reshape(out_channels, *([1] * spatial))
    return y.squeeze(0) if unbatched else y


def conv1d(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: Shape = 1,
    padding: Shape | str = 0,
    dilation: Shape = 1,
    groups: int = 1,
) -> Tensor:
    return _conv(input, weight, bias, stride, padding, dilation, groups, 1, "conv1d")


def conv2d(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: Shape = 1,
    padding: Shape | str = 0,
    dilation: Shape = 1,
    groups: int = 1,
) -> Tensor:
    return _conv(input, weight, bias, stride, padding, dilation, groups, 2, "conv2d")


def _spread(x: Tensor, stride: tuple) -> Tensor:
    """x with stride - 1 zeros between its elements along each spatial dimension."""
    for d, s in enumerate(stride):
        if s == 1:
            continue
        axis = 2 + d
        zeros = creation.zeros(x.shape, dtype=x.dtype, device=x.device)
        parts = [x.unsqueeze(axis + 1)] + [zeros.unsqueeze(axis + 1)] * (s - 1)
        spread = mv.cat(parts, axis + 1)
        shape = x.shape[:axis] + (x.shape[axis] * s,) + x.shape[axis + 1 :]
        x = spread.reshape(shape)
        x = mv.narrow(x, axis, 0, shape[axis] - (s - 1))
    return x


def _conv_transpose(input, weight, bias, stride, padding, output_padding, groups, dilation, spatial: int, op: str):
    x, unbatched = batched(input, spatial, op)
    if weight.ndim != spatial + 2:
        raise RuntimeError_(f"{op}: expected a {spatial + 2}-D weight, got shape {weight.shape}")
    in_channels, group_out = weight.shape[:2]
    kernel = weight.shape[2:]
    if groups < 1 or x.shape[1] != in_channels or in_channels % groups:
        raise RuntimeError_(
            f"{op}: weight of shape {weight.shape} expects {in_channels} input channels (divisible by "
            f"groups={groups}), got input of shape {tuple(input.shape)}"
        )
    stride, dilation = ntuple(stride, spatial, "stride"), ntuple(dilation, spatial, "dilation")
    padding = ntuple(padding, spatial, "padding")
    output_padding = ntuple(output_padding, spatial, "output_padding")
    for d in range(spatial):
        if output_padding[d] >= max(stride[d], dilation[d]):
            raise RuntimeError_(f"{op}: output padding must be smaller than either stride or dilation")
    x = _spread(x, stride)
    pads, crops = [], []
    for d in range(spatial):
        edge = dilation[d] * (kernel[d] - 1) - padding[d]
        left, right = edge, edge + output_padding[d]
        pads.append((max(left, 0), max(right, 0)))
        crops.append((max(-left, 0), max(-right, 0)))
    x = mv.pad(x, [p for pair in reversed(pads) for p in pair])
    if any(c != (0, 0) for c in crops):
        x = x[(slice(None), slice(None)) + tuple(slice(a, x.shape[2 + d] - b) for d, (a, b) in enumerate(crops))]
    # (C_in, C_out/g, *k) -> (C_out, C_in/g, *k), flipped: the kernel of the equivalent convolution
    w = weight.reshape(groups, in_channels // groups, group_out, *kernel).transpose(1, 2)
    w = w.reshape(groups * group_out, in_channels // groups, *kernel).flip(tuple(range(2, 2 + spatial)))
    y = _conv(x, w, bias, 1, 0, dilation, groups, spatial, op)
    return y.squeeze(0) if unbatched else y


def conv_transpose1d(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: Shape = 1,
    padding: Shape = 0,
    output_padding: Shape = 0,
    groups: int = 1,
    dilation: Shape = 1,
) -> Tensor:
    return _conv_transpose(
        input, weight, bias, stride, padding, output_padding, groups, dilation, 1, "conv_transpose1d"
    )


def conv_transpose2d(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: Shape = 1,
    padding: Shape = 0,
    output_padding: Shape = 0,
    groups: int = 1,
    dilation: Shape = 1,
) -> Tensor:
    return _conv_transpose(
        input, weight, bias, stride, padding, output_padding, groups, dilation, 2, "conv_transpose2d"
    )
