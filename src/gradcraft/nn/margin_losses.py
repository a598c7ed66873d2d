"""Margin and embedding losses, as torch.nn's (functional forms and modules), composed from public ops
with PyTorch's formulas (aten's Loss.cpp): margin_ranking_loss, hinge_embedding_loss,
cosine_embedding_loss, triplet_margin_loss (with pairwise_distance), multi_margin_loss,
soft_margin_loss, multilabel_soft_margin_loss."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gradcraft.errors import RuntimeError_, ValueError_
from gradcraft.nn.loss import _Loss
from gradcraft.ops.distance import pairwise_distance
from gradcraft.ops.elementwise import where
from gradcraft.ops.losses import legacy_reduction

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor


def _reduce(loss, reduction: str):
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise ValueError_(f"{reduction} is not a valid value for reduction")


def margin_ranking_loss(
    input1: Tensor,
    input2: Tensor,
    target: Tensor,
    margin: float = 0.0,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    reduction = legacy_reduction(size_average, reduce, reduction)
    if not (input1.ndim == input2.ndim == target.ndim):
        raise RuntimeError_(
            f"margin_ranking_loss : All input tensors should have same dimension but got sizes: input1: "
            f"{list(input1.shape)}, input2: {list(input2.shape)}, target: {list(target.shape)} "
        )
    return _reduce((-target * (input1 - input2) + margin).clamp(min=0), reduction)


def hinge_embedding_loss(
    input: Tensor,
    target: Tensor,
    margin: float = 1.0,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    reduction = legacy_reduction(size_average, reduce, reduction)
    zeros = input * 0
    output_margin = where(target != 1, (margin - input).clamp(min=0), zeros)
    output_self = where(target != -1, input, zeros)
    return _reduce(output_margin + output_self, reduction)


def cosine_embedding_loss(
    input1: Tensor,
    input2: Tensor,
    target: Tensor,
    margin: float = 0.0,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    reduction = legacy_reduction(size_average, reduce, reduction)
    if input1.shape != input2.shape:
        raise RuntimeError_(
            f"cosine_embedding_loss: input1 and input2 must have the same shape, got {list(input1.shape)} and "
            f"{list(input2.shape)}"
        )
    dim = 1 if input1.ndim == 2 else 0
    eps = 1e-12
    prod = (input1 * input2).sum(dim)
    mag1 = (input1 * input1).sum(dim) + eps
    mag2 = (input2 * input2).sum(dim) + eps
    cos = prod / (mag1 * mag2).sqrt()
    zeros = cos * 0
    pos = where(target == 1, 1 - cos, zeros)
    neg = where(target == -1, (cos - margin).clamp(min=0), zeros)
    return _reduce(pos + neg, reduction)


def triplet_margin_loss(
    anchor: Tensor,
    positive: Tensor,
    negative: Tensor,
    margin: float = 1.0,
    p: float = 2,
    eps: float = 1e-6,
    swap: bool = False,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    reduction = legacy_reduction(size_average, reduce, reduction)
    if not (anchor.ndim == positive.ndim == negative.ndim):
        raise RuntimeError_(
            f"The anchor, positive, and negative tensors are expected to have the same number of dimensions, but "
            f"got: anchor {anchor.ndim}D, positive {positive.ndim}D, and negative {negative.ndim}D inputs"
        )
    d_pos = pairwise_distance(anchor, positive, p, eps)
    d_neg = pairwise_distance(anchor, negative, p, eps)
    if swap:
        d_neg = d_neg.minimum(pairwise_distance(positive, negative, p, eps))
    return _reduce((margin + d_pos - d_neg).clamp(min=0), reduction)


def multi_margin_loss(
    input: Tensor,
    target: Tensor,
    p: int = 1,
    margin: float = 1.0,
    weight: Tensor | None = None,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    """sum over i != y of max(0, margin - x[y] + x[i])^p (times weight[y]), divided by the classes."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    if p not in (1, 2):
        raise ValueError_("only p == 1 and p == 2 supported")
    unbatched = input.ndim <= 1
    x = input.reshape(1, -1) if unbatched else input
    y = target.reshape(-1).long()
    picked = x.gather(1, y.unsqueeze(1))
    z = (margin - picked + x).clamp(min=0)
    if p == 2:
        z = z * z
    classes = x.shape[1]
    from gradcraft.ops.nn import one_hot

    z = z * (1 - one_hot(y, classes).to(z.dtype))
    if weight is not None:
        z = z * weight[y].unsqueeze(1).to(z.dtype)
    loss = z.sum(1) / classes
    if unbatched and reduction == "none":
        loss = loss.reshape(target.shape)
    return _reduce(loss, reduction)


def soft_margin_loss(
    input: Tensor, target: Tensor, size_average: bool | None = None, reduce: bool | None = None, reduction: str = "mean"
) -> Tensor:
    reduction = legacy_reduction(size_average, reduce, reduction)
    return _reduce((1 + (-target * input).exp()).log(), reduction)


def multilabel_soft_margin_loss(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    reduction = legacy_reduction(size_average, reduce, reduction)
    from gradcraft.ops.activations_more import logsigmoid

    loss = -(target * logsigmoid(input) + (1 - target) * logsigmoid(-input))
    if weight is not None:
        loss = loss * weight
    loss = loss.sum(-1) / input.shape[-1]
    return _reduce(loss, reduction)


# ------------------------------------------------------------------ modules


class MarginRankingLoss(_Loss):
    def __init__(
        self, margin: float = 0.0, size_average: bool | None = None, reduce: bool | None = None, reduction: str = "mean"
    ) -> None:
        super().__init__(size_average, reduce, reduction)
        self.margin = margin

    def forward(self, input1: Tensor, input2: Tensor, target: Tensor) -> Tensor:
        return margin_ranking_loss(input1, input2, target, margin=self.margin, reduction=self.reduction)


class HingeEmbeddingLoss(_Loss):
    def __init__(
        self, margin: float = 1.0, size_average: bool | None = None, reduce: bool | None = None, reduction: str = "mean"
    ) -> None:
        super().__init__(size_average, reduce, reduction)
        self.margin = margin

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return hinge_embedding_loss(input, target, margin=self.margin, reduction=self.reduction)


class CosineEmbeddingLoss(_Loss):
    def __init__(
        self, margin: float = 0.0, size_average: bool | None = None, reduce: bool | None = None, reduction: str = "mean"
    ) -> None:
        super().__init__(size_average, reduce, reduction)
        self.margin = margin

    def forward(self, input1: Tensor, input2: Tensor, target: Tensor) -> Tensor:
        return cosine_embedding_loss(input1, input2, target, margin=self.margin, reduction=self.reduction)


class TripletMarginLoss(_Loss):
    def __init__(
        self,
        margin: float = 1.0,
        p: float = 2.0,
        eps: float = 1e-6,
        swap: bool = False,
        size_average: bool | None = None,
        reduce: bool | None = None,
        reduction: str = "mean",
    ) -> None:
        super().__init__(size_average, reduce, reduction)
        if margin <= 0:
            raise ValueError_(f"TripletMarginLoss: expected margin to be greater than 0, got {margin} instead")
        self.margin, self.p, self.eps, self.swap = margin, p, eps, swap

    def forward(self, anchor: Tensor, positive: Tensor, negative: Tensor) -> Tensor:
        return triplet_margin_loss(
            anchor, positive, negative, self.margin, self.p, self.eps, self.swap, reduction=self.reduction
        )


class MultiMarginLoss(_Loss):
    def __init__(
        self,
        p: int = 1,
        margin: float = 1.0,
        weight: Tensor | None = None,
        size_average: bool | None = None,
        reduce: bool | None = None,
        reduction: str = "mean",
    ) -> None:
        super().__init__(size_average, reduce, reduction)
        if p not in (1, 2):
            raise ValueError_("only p == 1 and p == 2 supported")
        if weight is not None and weight.ndim != 1:
            raise ValueError_(f"MultiMarginLoss: expected weight to be None or 1D tensor, got {weight.ndim}D instead")
        self.register_buffer("weight", weight)
        self.p, self.margin = p, margin

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return multi_margin_loss(input, target, self.p, self.margin, self.weight, reduction=self.reduction)


class SoftMarginLoss(_Loss):
    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return soft_margin_loss(input, target, reduction=self.reduction)


class MultiLabelSoftMarginLoss(_Loss):
    def __init__(
        self,
        weight: Tensor | None = None,
        size_average: bool | None = None,
        reduce: bool | None = None,
        reduction: str = "mean",
    ) -> None:
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return multilabel_soft_margin_loss(input, target, self.weight, reduction=self.reduction)
