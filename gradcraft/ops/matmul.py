"""Matrix products (with NumPy/PyTorch batch broadcasting) and their gradients."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor


from gradcraft import dtypes
from gradcraft.errors import RuntimeError_, UserError
from gradcraft.ops import elementwise as ew
from gradcraft.ops.function import apply, gradient
from gradcraft.amp import policy as _amp


def matmul(a: Tensor, b: Tensor) -> Tensor:
    """a @ b. 1-D operands are treated as a row (left) or a column (right) vector, then squeezed."""
    if _amp.state.on:
        return _amp.call("matmul", matmul, (a, b), {})
    if a.ndim == 0 or b.ndim == 0:
        raise UserError(f"matmul needs tensors with at least 1 dimension, got shapes {a.shape} and {b.shape}")
    a, b = ew._operands(a, b, "matmul")
    if a.dtype == dtypes.bool_:
        raise UserError("matmul is not defined for bool tensors")
    a2 = a.reshape(1, a.shape[0]) if a.ndim == 1 else a
    b2 = b.reshape(b.shape[0], 1) if b.ndim == 1 else b
    if a2.shape[-1] != b2.shape[-2]:
        raise RuntimeError_(
            f"matmul shape mismatch: {a.shape} @ {b.shape} (inner dimensions {a2.shape[-1]} and {b2.shape[-2]} differ)"
        )
    try:
        batch = ew.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    except ValueError:
        raise RuntimeError_(f"matmul batch dimensions do not broadcast: {a.shape} @ {b.shape}") from None
    out = apply("matmul", (a2, b2), {}, batch + (a2.shape[-2], b2.shape[-1]), a.dtype)
    if a.ndim == 1:
        out = out.squeeze(-2)
    if b.ndim == 1:
        out = out.squeeze(-1)
    return out


@gradient("matmul")
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
    node = t._node
    return node is not None and node.op == "permute" and node.attrs["axes"] == (1, 0)
