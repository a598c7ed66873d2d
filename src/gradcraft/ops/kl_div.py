"""torch.nn.functional.kl_div: the pointwise KL divergence target * (log target - input), with `input`
given as log-probabilities (and `target` too when log_target=True), composed from elementwise ops."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor

from gradcraft.errors import ValueError_
from gradcraft.ops import elementwise as ew
from gradcraft.ops import reduce as rd


def kl_div(
    input: Tensor,
    target: Tensor,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
    log_target: bool = False,
) -> Tensor:
    if reduction not in ("mean", "batchmean", "sum", "none"):
        raise ValueError_(f"{reduction} is not a valid value for reduction")
    if log_target:
        loss = target.exp() * (target - input)
    else:
        # xlogy: a zero target contributes 0 (log of a stand-in 1, so neither value nor gradient is NaN)
        positive = target > 0
        safe = ew.where(positive, target, 1.0)
        loss = target * safe.log() - target * input
    if reduction == "none":
        return loss
    if reduction == "sum":
        return rd.sum(loss)
    if reduction == "batchmean":
        total = rd.sum(loss)
        return total / input.shape[0] if input.ndim != 0 else total
    return rd.mean(loss)
