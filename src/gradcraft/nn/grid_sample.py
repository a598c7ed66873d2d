"""F.affine_grid and F.grid_sample (4-D input; "bilinear" and "nearest", padding "zeros" and "border"),
composed from gathers, floors and products, so that the gradients with respect to the input and the
grid are PyTorch's (aten's GridSampler.h): the grid's through the bilinear weights, none through
"nearest"; a corner outside the input reads 0 under "zeros"; "border" clips the coordinates (with no
gradient at or past the edges, as PyTorch's clip)."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import numpy as np

from gradcraft.errors import UserError
from gradcraft.ops import elementwise as ew
from gradcraft.ops.creation import tensor

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor

_DEFAULT_CHANGED = (
    "Default grid_sample and affine_grid behavior has changed to align_corners=False since 1.3.0. Please specify "
    "align_corners=True if the old behavior is desired. See the documentation of grid_sample for details."
)


def _steps(n: int, align_corners: bool, dtype) -> np.ndarray:
    """The normalized coordinates of n pixels' centres, rounded as PyTorch's (aten's linspace_from_neg_one:
    linspace from both ends in the grid's dtype, then times (n - 1) / n): on a grid that lands exactly
    on pixels, the bilinear gradient's side (floor) depends on the last bit."""
    if n <= 1:
        return np.zeros(1, dtype)
    step = dtype.type(2.0) / dtype.type(n - 1)
    i = np.arange(n)
    steps = np.where(
        i < n // 2, dtype.type(-1.0) + step * i.astype(dtype), dtype.type(1.0) - step * (n - 1 - i).astype(dtype)
    )
    steps = steps.astype(dtype)
    return steps if align_corners else (steps * dtype.type(n - 1)) / dtype.type(n)


def affine_grid(theta: Tensor, size: list[int], align_corners: bool | None = None) -> Tensor:
    """F.affine_grid: the sampling grid (N, H, W, 2) (or (N, D, H, W, 3)) of the affine maps theta
    (N, 2, 3) (or (N, 3, 4)) for an output of `size` (N, C, H, W) (or (N, C, D, H, W))."""
    if align_corners is None:
        warnings.warn(_DEFAULT_CHANGED, stacklevel=2)
        align_corners = False
    if not theta.dtype.is_floating_point:
        raise ValueError(f"Expected theta to have floating point type, but got {theta.dtype}")
    size = [int(s) for s in size]
    if len(size) not in (4, 5):
        raise NotImplementedError(
            "affine_grid only supports 4D and 5D sizes, for 2D and 3D affine transforms, respectively. "
            f"Got size {size}."
        )
    dims = len(size) - 2
    if theta.ndim != 3 or tuple(theta.shape[-2:]) != (dims, dims + 1):
        kind = "2D affine matrices of shape Nx2x3" if dims == 2 else "3D affine matrices of shape Nx3x4"
        raise ValueError(f"Expected a batch of {kind} for size {size}. Got {theta.shape}.")
    if min(size) <= 0:
        raise ValueError(f"Expected non-zero, positive output size. Got {size}")
    spatial = size[2:]
    # base (*spatial, dims + 1): x along the last axis, then y (then z), then 1
    np_dtype = np.dtype(np.float64 if theta.dtype.itemsize == 8 else np.float32)
    axes = np.meshgrid(*[_steps(n, align_corners, np_dtype) for n in spatial], indexing="ij")
    base = np.stack([*reversed(axes), np.ones(spatial, np_dtype)], axis=-1).reshape(1, -1, dims + 1)
    base_t = tensor(base, dtype=theta.dtype, device=theta.device)
    grid = base_t @ theta.transpose(1, 2)  # (N, prod(spatial), dims)
    return grid.reshape(size[0], *spatial, dims)


def _unnormalize(coord: Tensor, size: int, align_corners: bool) -> Tensor:
    """Pixel coordinates, rounded as PyTorch computes them (GridSampler.h): on a grid that lands on
    pixels (an identity transform) the last bit decides which side floor() takes the gradient from."""
    if align_corners:
        return ((coord + 1.0) / 2) * (size - 1)
    # ((coord + 1) * size - 1) / 2 with the multiply-add rounded once, as PyTorch's compiled kernel
    # does (a fused multiply-add): float32 through float64; float64 with the product split exactly
    # (Veltkamp: a_hi has 26 bits, so a_hi * size and a_lo * size are exact for any image size)
    a = coord + 1.0
    if a.dtype.itemsize < 8:
        return ((a.double() * size - 1.0).to(a.dtype)) / 2
    c = a * 134217729.0  # 2^27 + 1
    a_hi = c - (c - a)
    a_lo = a - a_hi
    return ((a_hi * size - 1.0) + a_lo * size) / 2


def _clip(coord: Tensor, size: int) -> Tensor:
    """Coordinates clipped to [0, size - 1], with no gradient at or past the edges (aten's clip)."""
    clipped = ew.where(ew.le(coord, 0.0), 0.0, coord)
    return ew.where(ew.ge(coord, size - 1.0), float(size - 1), clipped)


def _corner(flat: Tensor, x: Tensor, y: Tensor, H: int, W: int) -> tuple[Tensor, Tensor]:
    """The input's values at integer-valued x, y (N, P), shape (N, C, P), and whether each is inside."""
    inside = ew.logical_and(
        ew.logical_and(ew.ge(x, 0.0), ew.le(x, W - 1.0)), ew.logical_and(ew.ge(y, 0.0), ew.le(y, H - 1.0))
    )
    index = (y.clamp(0, H - 1) * W + x.clamp(0, W - 1)).long()
    N, C, P = flat.shape[0], flat.shape[1], x.shape[1]
    values = flat.gather(2, index.unsqueeze(1).expand(N, C, P))
    return values, inside


def grid_sample(
    input: Tensor, grid: Tensor, mode: str = "bilinear", padding_mode: str = "zeros", align_corners: bool | None = None
) -> Tensor:
    """F.grid_sample: input (N, C, H, W) read at grid (N, Ho, Wo, 2)'s normalized (x, y) points: (N, C, Ho, Wo)."""
    if mode not in ("bilinear", "nearest", "bicubic"):
        raise ValueError(
            f"nn.functional.grid_sample(): expected mode to be 'bilinear', 'nearest' or 'bicubic', but got: '{mode}'"
        )
    if padding_mode not in ("zeros", "border", "reflection"):
        raise ValueError(
            "nn.functional.grid_sample(): expected padding_mode to be 'zeros', 'border', or 'reflection', "
            f"but got: '{padding_mode}'"
        )
    if mode == "bicubic" or padding_mode == "reflection":
        raise UserError(f"grid_sample: mode={mode!r} with padding_mode={padding_mode!r} is not supported")
    if align_corners is None:
        warnings.warn(_DEFAULT_CHANGED, stacklevel=2)
        align_corners = False
    if input.ndim != 4 or grid.ndim != 4 or grid.shape[-1] != 2:
        raise UserError(
            f"grid_sample: supports 4-D input (N, C, H, W) with a grid (N, H_out, W_out, 2); got input of shape "
            f"{tuple(input.shape)} and grid of shape {tuple(grid.shape)}"
        )
    if grid.shape[0] != input.shape[0]:
        raise RuntimeError(
            "grid_sampler(): expected grid and input to have same batch size, but got input with sizes "
            f"{list(input.shape)} and grid with sizes {list(grid.shape)}"
        )
    if input.dtype != grid.dtype:
        raise RuntimeError(
            "grid_sampler(): expected input and grid to have same dtype, but input has "
            f"{input.dtype} and grid has {grid.dtype}"
        )
    N, C, H, W = input.shape
    Ho, Wo = grid.shape[1], grid.shape[2]
    points = grid.reshape(N, Ho * Wo, 2)
    x = _unnormalize(points[..., 0], W, align_corners)  # (N, P) in pixels
    y = _unnormalize(points[..., 1], H, align_corners)
    if padding_mode == "border":
        x, y = _clip(x, W), _clip(y, H)
    flat = input.reshape(N, C, H * W)
    if mode == "nearest":
        values, inside = _corner(flat, x.round(), y.round(), H, W)
        out = values * inside.to(input.dtype).unsqueeze(1)
        if grid.requires_grad:  # PyTorch's grid gradient here: zeros (a where's unpicked side: exact 0s)
            out = out + ew.where(ew.lt(points, float("-inf")), points, 0.0).sum()
        return out.reshape(N, C, Ho, Wo)
    x0, y0 = x.floor(), y.floor()
    x1, y1 = x0 + 1.0, y0 + 1.0
    wx1, wy1 = x - x0, y - y0  # (floor carries no gradient: the grid's flows through these)
    wx0, wy0 = 1.0 - wx1, 1.0 - wy1
    out = None
    for cx, cy, weight in ((x0, y0, wx0 * wy0), (x1, y0, wx1 * wy0), (x0, y1, wx0 * wy1), (x1, y1, wx1 * wy1)):
        values, inside = _corner(flat, cx, cy, H, W)
        term = values * (weight * inside.to(input.dtype)).unsqueeze(1)
        out = term if out is None else out + term
    return out.reshape(N, C, Ho, Wo)
