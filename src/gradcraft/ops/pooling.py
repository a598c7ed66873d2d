"""Pooling (F.max_pool1d/2d, F.avg_pool1d/2d, the adaptive ones) composed from slicing, gathering
and reductions, no kernels of their own.

A max pool stacks the window's elements (one strided slice of the padded input per kernel
position, conv.windows) and takes each window's first maximum in row-major order with argmax and
take_along_dim, so its gradient goes to that one element, as PyTorch's does on ties. Adaptive pools
read windows of varying size: an average is a product with a constant pooling matrix per spatial
dimension; a maximum gathers each window at the largest window's size, the shorter windows
repeating their last element (a repeat never changes a maximum, nor which element is first)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Union

import numpy as np

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor

from gradcraft import dtypes
from gradcraft.errors import RuntimeError_
from gradcraft.ops import movement as mv
from gradcraft.ops.conv import batched, ntuple, windows
from gradcraft.ops.creation import tensor as _tensor
from gradcraft.typing import Shape

OutputSize = int | None | tuple[int | None, ...] | list[int | None]
Pooled = Union["Tensor", tuple["Tensor", "Tensor"]]  # noqa: UP007 (forward references); values, or (values, indices)


def _out_size(length: int, k: int, s: int, p: int, d: int, ceil_mode: bool, op: str) -> int:
    if p > k // 2:
        raise RuntimeError_(f"{op}: pad should be at most half of effective kernel size, but got pad={p}, kernel={k}")
    span = length + 2 * p - d * (k - 1) - 1
    out = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (out - 1) * s >= length + p:  # the last window must start inside the input or left pad
        out -= 1
    if out < 1:
        raise RuntimeError_(f"{op}: output size is too small (input {length}, kernel {k}, padding {p})")
    return out


def _geometry(x, spatial, kernel_size, stride, padding, dilation, ceil_mode, op):
    kernel = ntuple(kernel_size, spatial, "kernel_size")
    stride = kernel if stride is None or stride == [] or stride == () else ntuple(stride, spatial, "stride")
    padding, dilation = ntuple(padding, spatial, "padding"), ntuple(dilation, spatial, "dilation")
    sizes = x.shape[2:]
    out = tuple(
        _out_size(sizes[d], kernel[d], stride[d], padding[d], dilation[d], ceil_mode, op) for d in range(spatial)
    )
    # right padding so that every window (ceil_mode's last one too) lies inside the padded input
    right = [
        max(padding[d], (out[d] - 1) * stride[d] + dilation[d] * (kernel[d] - 1) + 1 - sizes[d] - padding[d])
        for d in range(spatial)
    ]
    pads = [(padding[d], right[d]) for d in range(spatial)]
    return kernel, stride, padding, dilation, out, pads


def _pad(x, pads, value):
    if all(pair == (0, 0) for pair in pads):
        return x
    return mv.pad(x, [p for pair in reversed(pads) for p in pair], value=value)


def _max_of_windows(cols: Tensor, positions: np.ndarray, return_indices: bool):
    """cols (N, C, K, *out): each window's first maximum; with the flat input index of that element
    (positions (K, *out), constant) when asked."""
    first = cols.argmax(2, keepdim=True)
    values = mv.take_along_dim(cols, first, 2).squeeze(2)
    if not return_indices:
        return values
    table = _tensor(positions, dtype=dtypes.int64, device=cols.device).unsqueeze(0).unsqueeze(0)
    table = table.expand(cols.shape[0], cols.shape[1], *positions.shape)
    return values, mv.take_along_dim(table, first, 2).squeeze(2)


def _max_pool(input, spatial, kernel_size, stride, padding, dilation, ceil_mode, return_indices, op):
    x, unbatched = batched(input, spatial, op)
    kernel, stride, padding, dilation, out, pads = _geometry(
        x, spatial, kernel_size, stride, padding, dilation, ceil_mode, op
    )
    cols = windows(_pad(x, pads, float("-inf")), kernel, stride, dilation, out)
    positions = None
    if return_indices:
        flat = np.arange(math.prod(x.shape[2:]), dtype=np.int64).reshape(x.shape[2:])
        flat = np.pad(flat, pads, constant_values=-1)
        positions = np.stack([flat[_window_index(p, stride, dilation, out)] for p in _kernel_positions(kernel)])
    result = _max_of_windows(cols, positions, return_indices)
    if unbatched:
        return tuple(r.squeeze(0) for r in result) if return_indices else result.squeeze(0)
    return result


def _kernel_positions(kernel):
    return [tuple(int(i) for i in p) for p in np.ndindex(*kernel)]


def _window_index(position, stride, dilation, out):
    return tuple(
        slice(position[d] * dilation[d], position[d] * dilation[d] + stride[d] * (out[d] - 1) + 1, stride[d])
        for d in range(len(out))
    )


def max_pool1d(
    input: Tensor,
    kernel_size: Shape,
    stride: Shape | None = None,
    padding: Shape = 0,
    dilation: Shape = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,
) -> Pooled:
    return _max_pool(input, 1, kernel_size, stride, padding, dilation, ceil_mode, return_indices, "max_pool1d")


def max_pool2d(
    input: Tensor,
    kernel_size: Shape,
    stride: Shape | None = None,
    padding: Shape = 0,
    dilation: Shape = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,
) -> Pooled:
    return _max_pool(input, 2, kernel_size, stride, padding, dilation, ceil_mode, return_indices, "max_pool2d")


def _avg_pool(input, spatial, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, op):
    x, unbatched = batched(input, spatial, op)
    kernel, stride, padding, _, out, pads = _geometry(x, spatial, kernel_size, stride, padding, 1, ceil_mode, op)
    cols = windows(_pad(x, pads, 0.0), kernel, stride, (1,) * spatial, out)
    total = cols.sum(2)
    if divisor_override:
        y = total / divisor_override
    else:
        # PyTorch's divisor: the window clipped to the padded input (count_include_pad) or to the input
        divisor = np.ones(out)
        for d in range(spatial):
            start = np.arange(out[d]) * stride[d] - padding[d]
            end = np.minimum(start + kernel[d], x.shape[2 + d] + padding[d])
            if not count_include_pad:
                start, end = np.maximum(start, 0), np.minimum(end, x.shape[2 + d])
            shape = [1] * spatial
            shape[d] = out[d]
            divisor = divisor * (end - start).reshape(shape)
        y = total / _tensor(divisor, dtype=x.dtype, device=x.device)
    return y.squeeze(0) if unbatched else y


def avg_pool1d(
    input: Tensor,
    kernel_size: Shape,
    stride: Shape | None = None,
    padding: Shape = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
) -> Tensor:
    return _avg_pool(input, 1, kernel_size, stride, padding, ceil_mode, count_include_pad, None, "avg_pool1d")


def avg_pool2d(
    input: Tensor,
    kernel_size: Shape,
    stride: Shape | None = None,
    padding: Shape = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> Tensor:
    return _avg_pool(
        input, 2, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, "avg_pool2d"
    )


def _adaptive_bounds(length: int, out: int) -> list:
    return [((i * length) // out, -(-((i + 1) * length) // out)) for i in range(out)]


def _adaptive_sizes(x, spatial, output_size):
    """The output size per spatial dimension (None: the input's size there, as PyTorch)."""
    if not isinstance(output_size, (tuple, list)):
        output_size = (output_size,) * spatial
    if len(output_size) != spatial:
        raise RuntimeError_(f"output_size must have {spatial} elements, got {tuple(output_size)}")
    return tuple(x.shape[2 + d] if v is None else int(v) for d, v in enumerate(output_size))


def _adaptive_avg(input, spatial, output_size, op):
    x, unbatched = batched(input, spatial, op)
    sizes = _adaptive_sizes(x, spatial, output_size)
    y = x
    for d in range(spatial):
        length = x.shape[2 + d]
        matrix = np.zeros((sizes[d], length))
        for i, (a, b) in enumerate(_adaptive_bounds(length, sizes[d])):
            matrix[i, a:b] = 1.0 / (b - a)
        pool = _tensor(matrix.T, dtype=x.dtype, device=x.device)
        # the pooled dimension moved last, multiplied by (length, out), moved back
        y = (y.transpose(2 + d, -1) @ pool).transpose(2 + d, -1)
    return y.squeeze(0) if unbatched else y


def adaptive_avg_pool1d(input: Tensor, output_size: OutputSize) -> Tensor:
    return _adaptive_avg(input, 1, output_size, "adaptive_avg_pool1d")


def adaptive_avg_pool2d(input: Tensor, output_size: OutputSize) -> Tensor:
    return _adaptive_avg(input, 2, output_size, "adaptive_avg_pool2d")


def _adaptive_max(input, spatial, output_size, return_indices, op):
    x, unbatched = batched(input, spatial, op)
    sizes = _adaptive_sizes(x, spatial, output_size)
    n, c = x.shape[:2]
    gathered, tables = x, []
    for d in range(spatial):
        bounds = _adaptive_bounds(x.shape[2 + d], sizes[d])
        widest = max(b - a for a, b in bounds)
        table = np.array([[min(a + j, b - 1) for j in range(widest)] for a, b in bounds], dtype=np.int64)
        tables.append(table)
        # dimension 2 + 2d (the next not yet gathered) becomes (out, widest)
        axis = 2 + 2 * d
        index = _tensor(table.reshape(-1), dtype=dtypes.int64, device=x.device)
        gathered = gathered.index_select(axis, index)
        shape = gathered.shape
        gathered = gathered.reshape(*shape[:axis], sizes[d], widest, *shape[axis + 1 :])
    # (N, C, o0, w0, o1, w1, ...) -> (N, C, w0 * w1..., o0, o1, ...)
    order = [2 + 2 * d + 1 for d in range(spatial)]
    cols = gathered.permute(0, 1, *order, *[2 + 2 * d for d in range(spatial)])
    widths = [t.shape[1] for t in tables]
    cols = cols.reshape(n, c, math.prod(widths), *sizes)
    positions = None
    if return_indices:  # the flat input index of each gathered element, laid out as cols
        if spatial == 1:
            positions = tables[0].T
        else:
            rows = tables[0].T[:, None, :, None]  # (w0, 1, o0, 1)
            columns = tables[1].T[None, :, None, :]  # (1, w1, 1, o1)
            positions = (rows * x.shape[3] + columns).reshape(widths[0] * widths[1], sizes[0], sizes[1])
    result = _max_of_windows(cols, positions, return_indices)
    if unbatched:
        return tuple(r.squeeze(0) for r in result) if return_indices else result.squeeze(0)
    return result


def adaptive_max_pool1d(input: Tensor, output_size: OutputSize, return_indices: bool = False) -> Pooled:
    return _adaptive_max(input, 1, output_size, return_indices, "adaptive_max_pool1d")


def adaptive_max_pool2d(input: Tensor, output_size: OutputSize, return_indices: bool = False) -> Pooled:
    return _adaptive_max(input, 2, output_size, return_indices, "adaptive_max_pool2d")
