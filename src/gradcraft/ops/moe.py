"""Mixture-of-experts token movement (gradcraft/models/moe.py uses them through nn.functional):
`moe_permute` puts each token at its experts' rows of an (E * capacity, C) buffer, `moe_unpermute`
brings each token's k rows back, weighted. Kernels: moe_permute[_backward], moe_unpermute[_backward]."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gradcraft.backend import opspec
from gradcraft.ops.function import apply, gradient

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor


def moe_permute(x: Tensor, slot: Tensor, rows: int) -> Tensor:
    """(rows, C) buffer with token x[n] at row slot[n, j] for each of its k assignments (zeros elsewhere)."""
    return apply(opspec.MOE_PERMUTE, (x, slot), {"rows": rows}, (rows, x.shape[1]), x.dtype)


@gradient(opspec.MOE_PERMUTE)
def _moe_permute_grad(node, out, g):
    x, slot = node.inputs
    return apply(opspec.MOE_PERMUTE_BACKWARD, (g, slot), {}, x.shape, g.dtype), None


def moe_unpermute(y: Tensor, slot: Tensor, weights: Tensor) -> Tensor:
    """out[n] = sum_j weights[n, j] * y[slot[n, j]]: each token's experts' outputs, weighted, back in place."""
    return apply(opspec.MOE_UNPERMUTE, (y, slot, weights), {}, (slot.shape[0], y.shape[1]), y.dtype)


@gradient(opspec.MOE_UNPERMUTE)
def _moe_unpermute_grad(node, out, g):
    y, slot, w = node.inputs
    dy, dw = apply(
        opspec.MOE_UNPERMUTE_BACKWARD, (y, slot, w, g), {}, (y.shape, w.shape), (y.dtype, w.dtype), n_outputs=2
    )
    return dy, None, dw
