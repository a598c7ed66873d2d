"""F.interpolate, nn.Upsample (and UpsamplingNearest2d/UpsamplingBilinear2d), F.pixel_shuffle and
pixel_unshuffle with nn.PixelShuffle/PixelUnshuffle.

interpolate resizes one spatial dimension after the other, with PyTorch's source-index rules (aten's
UpSample.h): "nearest" takes floor(dst * scale), "nearest-exact" floor((dst + 0.5) * scale), the
linear modes blend the two neighbours of (dst + 0.5) * scale - 0.5 (or dst * (in - 1) / (out - 1)
with align_corners), "bicubic" the four neighbours with PyTorch's cubic convolution (A = -0.75), and
"area" is adaptive average pooling. The scale is 1 / scale_factor when a scale factor was given
(and not recomputed), in / out otherwise. The indices and weights are computed on the host; the
data moves through index_select, multiplications and sums, so gradients flow as PyTorch's.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from gradcraft.errors import RuntimeError_, ValueError_
from gradcraft.nn.module import Module
from gradcraft.ops.creation import tensor
from gradcraft.typing import Shape

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor

_LINEAR = {"linear": 3, "bilinear": 4, "bicubic": 4, "trilinear": 5}
_MODES = ("nearest", "nearest-exact", "linear", "bilinear", "bicubic", "trilinear", "area")


def _sizes(input, size, scale_factor, recompute_scale_factor):
    spatial = input.ndim - 2
    if size is not None and scale_factor is not None:
        raise ValueError_("only one of size or scale_factor should be defined")
    if size is not None:
        sizes = list(size) if isinstance(size, (list, tuple)) else [size] * spatial
        if len(sizes) != spatial:
            raise ValueError_(
                f"Input and output must have the same number of spatial dimensions, but got input with spatial "
                f"dimensions of {list(input.shape[2:])} and output size of {sizes}. Please provide input tensor in "
                "(N, C, d1, d2, ...,dK) format and output size in (o1, o2, ...,oK) format."
            )
        return [int(s) for s in sizes], [None] * spatial
    if scale_factor is None:
        raise ValueError_("either size or scale_factor should be defined")
    scales = list(scale_factor) if isinstance(scale_factor, (list, tuple)) else [scale_factor] * spatial
    if len(scales) != spatial:
        raise ValueError_(
            f"Input and scale_factor must have the same number of spatial dimensions, but got input with spatial "
            f"dimensions of {list(input.shape[2:])} and scale_factor of shape {scales}."
        )
    sizes = [int(math.floor(float(n) * float(s))) for n, s in zip(input.shape[2:], scales)]
    return sizes, ([None] * spatial if recompute_scale_factor else [float(s) for s in scales])


def _scale(n_in: int, n_out: int, scale, align_corners: bool, np_float):
    if align_corners:
        return np_float((n_in - 1) / (n_out - 1)) if n_out > 1 else np_float(0)
    return np_float(1.0 / scale) if scale is not None and scale > 0 else np_float(n_in / n_out)


def _along(x, dim: int, index: np.ndarray, weights: np.ndarray | None = None):
    """x's entries at `index` along dim, times weights (broadcast along dim)."""
    picked = x.index_select(dim, tensor(index.astype(np.int64), device=x.device))
    if weights is None:
        return picked
    shape = [1] * x.ndim
    shape[dim] = len(weights)
    return picked * tensor(weights.reshape(shape), dtype=x.dtype, device=x.device)


def _cubic(t, a: float = -0.75):
    """PyTorch's cubic convolution coefficients for the 4 taps at fractional offset t."""

    def near(u):  # |u| <= 1
        return ((a + 2) * u - (a + 3)) * u * u + 1

    def far(u):  # 1 < |u| < 2
        return ((a * u - 5 * a) * u + 8 * a) * u - 4 * a

    return far(t + 1), near(t), near(1 - t), far(2 - t)


def _resize(x, dim: int, n_out: int, mode: str, scale, align_corners: bool):
    n_in = x.shape[dim]
    np_float = np.float64 if x.dtype.itemsize == 8 else np.float32
    dst = np.arange(n_out, dtype=np_float)
    if mode in ("nearest", "nearest-exact"):
        if n_out == n_in:
            return x
        s = _scale(n_in, n_out, scale, False, np.float32)
        if mode == "nearest":
            src = np.floor(dst.astype(np.float32) * s)
        else:
            src = np.floor((dst.astype(np.float32) + np.float32(0.5)) * s)
        return _along(x, dim, np.minimum(src.astype(np.int64), n_in - 1))
    s = _scale(n_in, n_out, scale, align_corners, np_float)
    src = dst * s if align_corners else s * (dst + np_float(0.5)) - np_float(0.5)
    if mode == "bicubic":
        base = np.floor(src)
        t = (src - base).astype(np_float)
        out = None
        for k, w in enumerate(_cubic(t)):
            index = np.clip(base.astype(np.int64) - 1 + k, 0, n_in - 1)
            term = _along(x, dim, index, w.astype(np_float))
            out = term if out is None else out + term
        return out
    src = np.maximum(src, np_float(0)) if not align_corners else src
    i0 = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
    i1 = np.minimum(i0 + 1, n_in - 1)
    lam = (src - i0).astype(np_float)
    return _along(x, dim, i0, (1 - lam).astype(np_float)) + _along(x, dim, i1, lam)


def interpolate(
    input: Tensor,
    size: Shape | None = None,
    scale_factor: float | tuple[float, ...] | None = None,
    mode: str = "nearest",
    align_corners: bool | None = None,
    recompute_scale_factor: bool | None = None,
    antialias: bool = False,
) -> Tensor:
    if mode not in _MODES:
        raise NotImplementedError(
            f"Input Error: Only 3D, 4D and 5D input Tensors supported (got {input.ndim}D) for the modes: nearest | "
            f"linear | bilinear | bicubic | trilinear | area | nearest-exact (got {mode})"
        )
    if mode in ("nearest", "area", "nearest-exact"):
        if align_corners is not None:
            raise ValueError_(
                "align_corners option can only be set with the interpolating modes: linear | bilinear | bicubic | "
                "trilinear"
            )
    elif align_corners is None:
        align_corners = False
    if antialias:
        raise NotImplementedError("interpolate: antialias=True is not supported")
    if mode in _LINEAR and input.ndim != _LINEAR[mode]:
        raise NotImplementedError(f"Got {input.ndim}D input, but {mode} mode needs {_LINEAR[mode]}D input")
    if input.ndim not in (3, 4, 5):
        raise NotImplementedError(
            f"Input Error: Only 3D, 4D and 5D input Tensors supported (got {input.ndim}D) for the modes: nearest | "
            f"linear | bilinear | bicubic | trilinear | area | nearest-exact (got {mode})"
        )
    sizes, scales = _sizes(input, size, scale_factor, recompute_scale_factor)
    if any(s <= 0 for s in sizes):
        shown = ", ".join(map(str, sizes))
        raise RuntimeError_(f"Input and output sizes should be greater than 0, but got output ({shown})")
    if mode == "area":
        from gradcraft.ops import pooling

        pool = {3: pooling.adaptive_avg_pool1d, 4: pooling.adaptive_avg_pool2d}.get(input.ndim)
        if pool is None:
            raise NotImplementedError("interpolate: mode='area' supports 3D and 4D inputs")
        return pool(input, sizes if input.ndim == 4 else sizes[0])
    out = input
    for k, (n_out, scale) in enumerate(zip(sizes, scales)):
        out = _resize(out, 2 + k, n_out, mode, scale, bool(align_corners))
    return out


def upsample(
    input: Tensor,
    size: Shape | None = None,
    scale_factor: float | tuple[float, ...] | None = None,
    mode: str = "nearest",
    align_corners: bool | None = None,
) -> Tensor:
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(
    input: Tensor, size: Shape | None = None, scale_factor: float | tuple[float, ...] | None = None
) -> Tensor:
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(
    input: Tensor, size: Shape | None = None, scale_factor: float | tuple[float, ...] | None = None
) -> Tensor:
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)


class Upsample(Module):
    def __init__(
        self,
        size: Shape | None = None,
        scale_factor: float | tuple[float, ...] | None = None,
        mode: str = "nearest",
        align_corners: bool | None = None,
        recompute_scale_factor: bool | None = None,
    ) -> None:
        super().__init__()
        self.name = type(self).__name__
        self.size = size
        if isinstance(scale_factor, tuple):
            self.scale_factor = tuple(float(f) for f in scale_factor)
        else:
            self.scale_factor = float(scale_factor) if scale_factor else None
        self.mode, self.align_corners, self.recompute_scale_factor = mode, align_corners, recompute_scale_factor

    def forward(self, input: Tensor) -> Tensor:
        return interpolate(
            input, self.size, self.scale_factor, self.mode, self.align_corners, self.recompute_scale_factor
        )

    def extra_repr(self) -> str:
        info = f"scale_factor={self.scale_factor!r}" if self.scale_factor is not None else f"size={self.size!r}"
        return info + f", mode={self.mode!r}"


class UpsamplingNearest2d(Upsample):
    def __init__(self, size: Shape | None = None, scale_factor: float | tuple[float, ...] | None = None) -> None:
        super().__init__(size, scale_factor, mode="nearest")


class UpsamplingBilinear2d(Upsample):
    def __init__(self, size: Shape | None = None, scale_factor: float | tuple[float, ...] | None = None) -> None:
        super().__init__(size, scale_factor, mode="bilinear", align_corners=True)


def pixel_shuffle(input: Tensor, upscale_factor: int) -> Tensor:
    """(*, C * r^2, H, W) -> (*, C, H * r, W * r)."""
    r = int(upscale_factor)
    if input.ndim < 3:
        raise RuntimeError_(
            f"pixel_shuffle expects input to have at least 3 dimensions, but got input with {input.ndim} dimension(s)"
        )
    *lead, c, h, w = input.shape
    if c % (r * r):
        raise RuntimeError_(
            f"pixel_shuffle expects its input's 'channel' dimension to be divisible by the square of upscale_factor, "
            f"but input.size(-3)={c} is not divisible by {r * r}"
        )
    n = len(lead)
    x = input.reshape(*lead, c // (r * r), r, r, h, w)
    x = x.permute(*range(n), n, n + 3, n + 1, n + 4, n + 2)
    return x.reshape(*lead, c // (r * r), h * r, w * r)


def pixel_unshuffle(input: Tensor, downscale_factor: int) -> Tensor:
    """(*, C, H * r, W * r) -> (*, C * r^2, H, W)."""
    r = int(downscale_factor)
    if input.ndim < 3:
        raise RuntimeError_(
            f"pixel_unshuffle expects input to have at least 3 dimensions, but got input with {input.ndim} dimension(s)"
        )
    *lead, c, h, w = input.shape
    if h % r or w % r:
        raise RuntimeError_(
            f"pixel_unshuffle expects height and width to be divisible by downscale_factor, but got "
            f"input.size(-2)={h} and input.size(-1)={w} for downscale_factor={r}"
        )
    n = len(lead)
    x = input.reshape(*lead, c, h // r, r, w // r, r)
    x = x.permute(*range(n), n, n + 2, n + 4, n + 1, n + 3)
    return x.reshape(*lead, c * r * r, h // r, w // r)


class PixelShuffle(Module):
    def __init__(self, upscale_factor: int) -> None:
        super().__init__()
        self.upscale_factor = upscale_factor

    def forward(self, input: Tensor) -> Tensor:
        return pixel_shuffle(input, self.upscale_factor)

    def extra_repr(self) -> str:
        return f"upscale_factor={self.upscale_factor}"


class PixelUnshuffle(Module):
    def __init__(self, downscale_factor: int) -> None:
        super().__init__()
        self.downscale_factor = downscale_factor

    def forward(self, input: Tensor) -> Tensor:
        return pixel_unshuffle(input, self.downscale_factor)

    def extra_repr(self) -> str:
        return f"downscale_factor={self.downscale_factor}"
