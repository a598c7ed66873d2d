"""nn.PairwiseDistance and nn.CosineSimilarity: the module forms of F.pairwise_distance and
F.cosine_similarity."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gradcraft.nn.module import Module
from gradcraft.ops.distance import pairwise_distance
from gradcraft.ops.losses import cosine_similarity

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor


class PairwiseDistance(Module):
    def __init__(self, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False) -> None:
        super().__init__()
        self.norm, self.eps, self.keepdim = p, eps, keepdim

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        return pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim)


class CosineSimilarity(Module):
    def __init__(self, dim: int = 1, eps: float = 1e-8) -> None:
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        return cosine_similarity(x1, x2, self.dim, self.eps)
