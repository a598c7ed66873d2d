"""Losses and activations composed from elementwise ops and reductions (no kernels of their own):
l1, smooth L1 / Huber, binary cross-entropy (on probabilities and on logits), leaky ReLU, ELU,
softplus, normalize, cosine similarity. Their gradients are those of the ops they are made of."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor

from gradcraft.errors import ValueError_
from gradcraft.ops import elementwise as ew
from gradcraft.ops import reduce as rd
from gradcraft.amp import policy as _amp


def legacy_reduction(size_average, reduce, reduction: str) -> str:
    """PyTorch's rule for the deprecated size_average/reduce: either given overrides reduction."""
    if size_average is None and reduce is None:
        return reduction
    warnings.warn("size_average and reduce args will be deprecated, please use reduction instead.", stacklevel=3)
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    return ("mean" if size_average else "sum") if reduce else "none"


def _weighted(loss, weight):
    return loss if weight is None else ew.mul(loss, weight)


def weighted_reduce(loss, weight, reduction: str, op: str):
    """l1_loss and mse_loss with weight=: a weighted mean divides by the weights' sum, as PyTorch's."""
    if weight is None or reduction != "mean":
        return _reduce(_weighted(loss, weight), reduction, op)
    if tuple(weight.shape) != tuple(loss.shape):
        raise ValueError_("Weights and input must have the same size.")
    return ew.div(rd.sum(ew.mul(loss, weight)), rd.sum(weight))


def _reduce(loss, reduction: str, op: str):
    if reduction == "mean":
        return rd.mean(loss)
    if reduction == "sum":
        return rd.sum(loss)
    if reduction == "none":
        return loss
    raise ValueError_(f"{op}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def l1_loss(
    input: Tensor,
    target: Tensor,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
    weight: Tensor | None = None,
) -> Tensor:
    reduction = legacy_reduction(size_average, reduce, reduction)
    if _amp.state.on:
        return _amp.call("l1_loss", l1_loss, (input, target), {"reduction": reduction, "weight": weight})
    return weighted_reduce(ew.abs(ew.sub(input, target)), weight, reduction, "l1_loss")


def smooth_l1_loss(
    input: Tensor,
    target: Tensor,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
    beta: float = 1.0,
) -> Tensor:
    reduction = legacy_reduction(size_average, reduce, reduction)
    if _amp.state.on:
        return _amp.call("smooth_l1_loss", smooth_l1_loss, (input, target), {"reduction": reduction, "beta": beta})
    diff = ew.abs(ew.sub(input, target))
    if beta == 0:
        return _reduce(diff, reduction, "smooth_l1_loss")
    loss = ew.where(ew.lt(diff, beta), ew.div(ew.mul(ew.mul(diff, diff), 0.5), beta), ew.sub(diff, 0.5 * beta))
    return _reduce(loss, reduction, "smooth_l1_loss")


def huber_loss(
    input: Tensor, target: Tensor, reduction: str = "mean", delta: float = 1.0, weight: Tensor | None = None
) -> Tensor:
    if _amp.state.on:
        return _amp.call("huber_loss", huber_loss, (input, target, reduction, delta, weight), {})
    diff = ew.abs(ew.sub(input, target))
    loss = ew.where(ew.lt(diff, delta), ew.mul(ew.mul(diff, diff), 0.5), ew.mul(ew.sub(diff, 0.5 * delta), delta))
    return _reduce(_weighted(loss, weight), reduction, "huber_loss")


def binary_cross_entropy(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    """-(t log p + (1 - t) log(1 - p)), the logs clamped at -100 as PyTorch does."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    if _amp.state.on:
        return _amp.call(
            "binary_cross_entropy", binary_cross_entropy, (input, target, weight), {"reduction": reduction}
        )
    log_p = ew.maximum(ew.log(input), -100.0)
    log_q = ew.maximum(ew.log(ew.sub(1.0, input)), -100.0)
    loss = ew.neg(ew.add(ew.mul(target, log_p), ew.mul(ew.sub(1.0, target), log_q)))
    if weight is not None:
        loss = ew.mul(loss, weight)
    return _reduce(loss, reduction, "binary_cross_entropy")


def binary_cross_entropy_with_logits(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
    pos_weight: Tensor | None = None,
) -> Tensor:
    """The stable form: max(x, 0) - x t + log(1 + exp(-|x|)) (with pos_weight: PyTorch's formula)."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    if _amp.state.on:
        return _amp.call(
            "binary_cross_entropy_with_logits",
            binary_cross_entropy_with_logits,
            (input, target, weight),
            {"reduction": reduction, "pos_weight": pos_weight},
        )
    log_sig_neg = softplus(ew.neg(input))  # -log(sigmoid(x)) = softplus(-x)
    if pos_weight is None:
        loss = ew.add(ew.mul(ew.sub(1.0, target), input), log_sig_neg)
    else:
        log_weight = ew.add(ew.mul(ew.sub(pos_weight, 1.0), target), 1.0)
        loss = ew.add(ew.mul(ew.sub(1.0, target), input), ew.mul(log_weight, log_sig_neg))
    if weight is not None:
        loss = ew.mul(loss, weight)
    return _reduce(loss, reduction, "binary_cross_entropy_with_logits")


def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """log(1 + exp(beta x)) / beta, computed stably; the input itself above threshold, as PyTorch."""
    if _amp.state.on:
        return _amp.call("softplus", softplus, (input, beta, threshold), {})
    x = ew.mul(input, beta) if beta != 1.0 else input
    stable = ew.add(ew.maximum(x, 0.0), ew.log(ew.add(ew.exp(ew.neg(ew.abs(x))), 1.0)))
    out = ew.div(stable, beta) if beta != 1.0 else stable
    return ew.where(ew.gt(x, threshold), input, out)


def leaky_relu(input, negative_slope: float = 0.01):
    return ew.where(ew.gt(input, 0), input, ew.mul(input, negative_slope))


def elu(input, alpha: float = 1.0):
    if _amp.state.on:
        return _amp.call("elu", elu, (input, alpha), {})
    positive = ew.gt(input, 0)
    negative_part = ew.where(positive, 0.0, input)  # (not minimum(x, 0): its gradient halves at the tie x = 0)
    return ew.where(positive, input, ew.mul(ew.sub(ew.exp(negative_part), 1.0), alpha))


def normalize(input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12, out: Tensor | None = None) -> Tensor:
    if out is not None:
        from gradcraft.ops.out_args import fill

        return fill(out, normalize(input, p, dim, eps), "normalize")
    if _amp.state.on:
        return _amp.call("normalize", normalize, (input, p, dim, eps), {})
    from gradcraft.ops.linalg import norm

    return ew.div(input, ew.maximum(norm(input, p, dim, keepdim=True), eps))


def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    if _amp.state.on:
        return _amp.call("cosine_similarity", cosine_similarity, (x1, x2, dim, eps), {})
    from gradcraft.ops.linalg import norm

    dot = rd.sum(ew.mul(x1, x2), dim)
    return ew.div(dot, ew.mul(ew.maximum(norm(x1, 2, dim), eps), ew.maximum(norm(x2, 2, dim), eps)))
