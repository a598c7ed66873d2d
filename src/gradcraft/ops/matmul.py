"""Matrix products (with NumPy/PyTorch batch broadcasting) and their gradients."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor


from gradcraft import dtypes
from gradcraft.backend import opspec
from gradcraft.errors import RuntimeError_, UserError
from gradcraft.ops import elementwise as ew
from gradcraft.ops.function import apply, gradient
from gradcraft.tensor import node_of
from gradcraft.amp import policy as _amp


def matmul(input: Tensor, other: Tensor) -> Tensor:
    """a @ b. 1-D operands are treated as a row (left) or a column (right) vector, then squeezed."""
    if _amp.state.on:
        return _amp.call("matmul", matmul, (input, other), {})
    if input.ndim == 0 or other.ndim == 0:
        raise UserError(f"matmul needs tensors with at least 1 dimension, got shapes {input.shape} and {other.shape}")
    input, other = ew._operands(input, other, "matmul")
    if input.dtype == dtypes.bool_:
        raise UserError("matmul is not defined for bool tensors")
    a2 = input.reshape(1, input.shape[0]) if input.ndim == 1 else input
    b2 = other.reshape(other.shape[0], 1) if other.ndim == 1 else other
    if a2.shape[-1] != b2.shape[-2]:
        raise RuntimeError_(
            f"matmul shape mismatch: {input.shape} @ {other.shape}"
            f" (inner dimensions {a2.shape[-1]} and {b2.shape[-2]} differ)"
        )
    try:
        batch = ew.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    except ValueError:
        raise RuntimeError_(f"matmul batch dimensions do not broadcast: {input.shape} @ {other.shape}") from None
    out = apply(opspec.MATMUL, (a2, b2), {}, batch + (a2.shape[-2], b2.shape[-1]), input.dtype)
    if input.ndim == 1:
        out = out.squeeze(-2)
    if other.ndim == 1:
        out = out.squeeze(-1)
    return out


@gradient(opspec.MATMUL)
def _matmul_grad(node, out, g):
    a, b = node.inputs
    grad_a = ew.sum_to(matmul(g, b.mT), a.shape) if a.requires_grad else None
    grad_b = None
    if b.requires_grad:
        if b.ndim == 2 and a.ndim >= 2:
            # A weight shared over the batch: fold the batch into the rows, one (K, rows) @ (rows, N).
            rows_a, rows_g = a.reshape(-1, a.shape[-1]), g.reshape(-1, g.shape[-1])
            if _is_transpose(b):
                # b = W.mT (a Linear layer): compute (g^T a)^T, whose transpose back is W's gradient,
                # laid out like W (the same product; no copy of the gradient to make it contiguous).
                grad_b = matmul(rows_g.mT, rows_a).mT
            else:
                grad_b = matmul(rows_a.mT, rows_g)
        else:
            grad_b = ew.sum_to(matmul(a.mT, g), b.shape)
    return grad_a, grad_b


def _is_transpose(t) -> bool:
    """t is a lazy view swapping the last two axes of another tensor (x.mT)."""
    node = node_of(t)
    return node is not None and node.op == "permute" and node.attrs["axes"] == (1, 0)
