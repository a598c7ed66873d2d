"""Loss modules, as in torch.nn: each holds its options and calls the functional loss."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor

from gradcraft.errors import ValueError_
from gradcraft.nn import functional as F
from gradcraft.nn.module import Module
from gradcraft.ops.losses import legacy_reduction


class _Loss(Module):
    def __init__(self, size_average: bool | None = None, reduce: bool | None = None, reduction: str = "mean"):
        super().__init__()
        reduction = legacy_reduction(size_average, reduce, reduction)
        if reduction not in ("mean", "sum", "none"):
            raise ValueError_(f"{type(self).__name__}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
        self.reduction = reduction


class CrossEntropyLoss(_Loss):
    def __init__(
        self,
        weight: Tensor | None = None,
        size_average: bool | None = None,
        ignore_index: int = -100,
        reduce: bool | None = None,
        reduction: str = "mean",
        label_smoothing: float = 0.0,
    ) -> None:
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)  # (None: not in the state dict, as PyTorch's)
        self.ignore_index, self.label_smoothing = ignore_index, label_smoothing

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.cross_entropy(
            input,
            target,
            self.weight,
            ignore_index=self.ignore_index,
            reduction=self.reduction,
            label_smoothing=self.label_smoothing,
        )


class NLLLoss(_Loss):
    def __init__(
        self,
        weight: Tensor | None = None,
        size_average: bool | None = None,
        ignore_index: int = -100,
        reduce: bool | None = None,
        reduction: str = "mean",
    ) -> None:
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)
        self.ignore_index = ignore_index

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.nll_loss(input, target, self.weight, ignore_index=self.ignore_index, reduction=self.reduction)


class _FunctionalLoss(_Loss):
    """A loss module that calls `function` (its functional form) with its options by name."""

    function: Callable[..., Tensor]

    def __init__(
        self, size_average: bool | None = None, reduce: bool | None = None, reduction: str = "mean", **options
    ) -> None:
        super().__init__(size_average, reduce, reduction)
        self._options = tuple(options)
        for name, value in options.items():
            setattr(self, name, value)

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        options = {name: getattr(self, name) for name in self._options}
        return type(self).function(input, target, reduction=self.reduction, **options)


class MSELoss(_FunctionalLoss):
    function = staticmethod(F.mse_loss)


class L1Loss(_FunctionalLoss):
    function = staticmethod(F.l1_loss)


class SmoothL1Loss(_FunctionalLoss):
    function = staticmethod(F.smooth_l1_loss)

    def __init__(
        self, size_average: bool | None = None, reduce: bool | None = None, reduction: str = "mean", beta: float = 1.0
    ) -> None:
        super().__init__(size_average, reduce, reduction, beta=beta)


class HuberLoss(_FunctionalLoss):
    function = staticmethod(F.huber_loss)

    def __init__(self, reduction: str = "mean", delta: float = 1.0) -> None:
        super().__init__(reduction=reduction, delta=delta)


class BCELoss(_FunctionalLoss):
    function = staticmethod(F.binary_cross_entropy)

    def __init__(
        self,
        weight: Tensor | None = None,
        size_average: bool | None = None,
        reduce: bool | None = None,
        reduction: str = "mean",
    ) -> None:
        super().__init__(size_average, reduce, reduction, weight=weight)


class BCEWithLogitsLoss(_FunctionalLoss):
    function = staticmethod(F.binary_cross_entropy_with_logits)

    def __init__(
        self,
        weight: Tensor | None = None,
        size_average: bool | None = None,
        reduce: bool | None = None,
        reduction: str = "mean",
        pos_weight: Tensor | None = None,
    ) -> None:
        super().__init__(size_average, reduce, reduction, weight=weight, pos_weight=pos_weight)


class KLDivLoss(_FunctionalLoss):
    """KL divergence of `target` from the log-probabilities `input` (F.kl_div); reduction="batchmean"
    divides the sum by the batch size, the mathematically correct mean."""

    function = staticmethod(F.kl_div)

    def __init__(
        self,
        size_average: bool | None = None,
        reduce: bool | None = None,
        reduction: str = "mean",
        log_target: bool = False,
    ) -> None:
        # "batchmean" is KL's own reduction, outside _Loss's three; F.kl_div checks it at the call, as PyTorch does
        super().__init__(size_average, reduce, "mean", log_target=log_target)
        if size_average is None and reduce is None:
            self.reduction = reduction
