"""F.pairwise_distance (torch.pairwise_distance) and torch.cdist, composed from elementwise ops and norm."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gradcraft.errors import RuntimeError_
from gradcraft.ops.linalg import norm

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor


def pairwise_distance(x1: Tensor, x2: Tensor, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False) -> Tensor:
    """The p-norm of x1 - x2 + eps over the last dimension (as PyTorch: eps added before the norm)."""
    output_dim = max(x1.ndim, x2.ndim)
    if output_dim == 0:
        raise RuntimeError_("pairwise_distance: expected at least one dimension in x1 or x2")
    diff = x1 - x2 + eps
    return norm(diff, p, output_dim - 1 if diff.ndim == output_dim else -1, keepdim)


def cdist(x1: Tensor, x2: Tensor, p: float = 2.0, compute_mode: str = "use_mm_for_euclid_dist_if_necessary") -> Tensor:
    """The p-norm distance between each row of x1 (..., P, M) and each row of x2 (..., R, M): (..., P, R).
    Computed from the differences for every p (PyTorch may use a matrix-product form for p=2: the
    same values up to rounding); the gradient of a zero distance is zero, as PyTorch's."""
    from gradcraft.ops import elementwise as ew
    from gradcraft.ops import reduce as rd

    if x1.ndim < 2 or x2.ndim < 2:
        raise RuntimeError_(f"cdist only supports at least 2D tensors, X1 got: {x1.ndim}D, X2 got: {x2.ndim}D")
    if x1.shape[-1] != x2.shape[-1]:
        raise RuntimeError_(f"X1 and X2 must have the same number of columns. X1: {x1.shape[-1]} X2: {x2.shape[-1]}")
    if p < 0:
        raise RuntimeError_(f"cdist only supports non-negative p values, got {p}")
    diff = x1.unsqueeze(-2) - x2.unsqueeze(-3)
    if p == 2:
        squared = rd.sum(diff * diff, -1)
        positive = squared > 0
        # sqrt of a stand-in 1 where the distance is 0, so the gradient there is 0, not inf * 0
        return ew.where(positive, ew.sqrt(ew.where(positive, squared, 1.0)), 0.0)
    if p == 1 or p == 0 or p == float("inf"):
        return norm(diff, p, -1)
    magnitude = ew.abs(diff)
    summed = rd.sum(ew.pow(magnitude, float(p)), -1)
    positive = summed > 0
    return ew.where(positive, ew.pow(ew.where(positive, summed, 1.0), 1.0 / p), 0.0)
