"""F.pad with PyTorch's four modes: 'constant' (negative widths crop, as PyTorch's), and 'reflect',
'replicate' and 'circular', built from slices, flips and concatenation (ops/conv.py's pad_spatial)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from gradcraft.errors import RuntimeError_
from gradcraft.errors import ValueError_
from gradcraft.ops import movement as mv

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor

_MODES = {"reflect": "reflect", "replicate": "replicate", "circular": "circular"}


def pad(input: Tensor, pad: Sequence[int], mode: str = "constant", value: float | None = None) -> Tensor:
    """`pad` lists (left, right) widths starting from the last dimension."""
    pad = [int(p) for p in pad]
    if len(pad) % 2:
        raise RuntimeError_("Padding length must be divisible by 2")
    if len(pad) // 2 > input.ndim:
        raise RuntimeError_("Padding length should be less than or equal to two times the input dimension")
    if mode == "constant":
        if any(p < 0 for p in pad):  # a negative width removes elements
            x = input
            for i in range(len(pad) // 2):
                axis = input.ndim - 1 - i
                left, right = pad[2 * i], pad[2 * i + 1]
                start, stop = max(0, -left), x.shape[axis] - max(0, -right)
                x = x.narrow(axis, start, max(0, stop - start))
            pad = [max(0, p) for p in pad]
            input = x
        return mv.pad(input, pad, "constant", value) if any(pad) else input
    if mode not in _MODES:
        raise NotImplementedError(f"Unrecognised padding mode {mode}")
    if value is not None and value != 0:
        raise ValueError_(f'Padding mode "{mode}" doesn\'t take in value argument')
    dims = len(pad) // 2
    if dims > 3 or input.ndim not in (dims + 1, dims + 2):
        raise NotImplementedError(
            f"Only 2D, 3D, 4D, 5D padding with non-constant padding are supported for now; got a {input.ndim}D "
            f"input with padding for {dims} dimensions"
        )
    from gradcraft.ops.conv import pad_spatial

    pairs = [(pad[2 * i], pad[2 * i + 1]) for i in range(dims)]
    return pad_spatial(input, list(reversed(pairs)), _MODES[mode])
