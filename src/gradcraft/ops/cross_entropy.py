"""The cross-entropy family: cross_entropy (one fused kernel forward and backward),
linear_cross_entropy (the output layer and its loss without the whole logits), nll_loss and
mse_loss (composed), the family's name on the CPU (backend/cpu/cross_entropy.py) and on CUDA
(backend/cuda/cross_entropy.py, kernels/cross_entropy.cu) too."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gradcraft.backend import opspec
from gradcraft.device import get_backend
from gradcraft.typing import DTypeLike

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor

from gradcraft import dtypes
from gradcraft.amp import policy as _amp
from gradcraft.errors import UserError
from gradcraft.ops import elementwise as ew
from gradcraft.ops.function import apply, gradient, is_grad_enabled
from gradcraft.ops.losses import legacy_reduction, weighted_reduce
from gradcraft.ops.reduce import sum as reduce_sum


def _float_input(x, op):
    if not x.dtype.is_floating_point:
        raise UserError(f"{op} needs a floating-point tensor, got {x.dtype.name}; convert with .float()")


def cross_entropy(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    size_average: bool | None = None,
    ignore_index: int = -100,
    reduce: bool | None = None,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
    valid_classes: int | None = None,
    dtype: DTypeLike = None,
) -> Tensor:
    """F.cross_entropy with class indices: input (N, C) or (N, C, d1, ...), target (N) or (N, d1, ...).

    dtype (as F.softmax's): the loss is computed as if the input were cast to dtype first. For
    half-precision logits and dtype=float32 the kernels read the logits as they are and return float32
    losses, the gradient coming back in the logits' dtype: no float32 copy of (N, C) logits.

    valid_classes (not in PyTorch): only the first valid_classes of the C columns are classes; the
    others (a vocabulary padded for faster matmuls) are left out of the softmax and get a zero
    gradient, as if the input were sliced to them, without copying it.
    """
    reduction = legacy_reduction(size_average, reduce, reduction)
    if _amp.state.on:
        return _amp.call(
            "cross_entropy",
            cross_entropy,
            (input, target, weight),
            {
                "ignore_index": ignore_index,
                "reduction": reduction,
                "label_smoothing": label_smoothing,
                "valid_classes": valid_classes,
                "dtype": dtype,
            },
        )
    if weight is not None or target.dtype.is_floating_point:  # class weights, probability targets: composed
        from gradcraft.ops import class_weights

        if valid_classes is not None:
            raise UserError("cross_entropy: valid_classes is for class-index targets without weights")
        input = ew.cast(input, dtype) if dtype is not None else input
        return class_weights.cross_entropy(input, target, weight, ignore_index, reduction, label_smoothing)
    if reduction not in ("mean", "sum", "none"):
        raise UserError(f"cross_entropy reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    if not 0.0 <= label_smoothing <= 1.0:
        raise UserError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
    _float_input(input, "cross_entropy")
    float_loss = dtype is not None and dtype == dtypes.float32 and input.dtype in (dtypes.bfloat16, dtypes.float16)
    if dtype is not None and not float_loss:
        input = ew.cast(input, dtype)
    if target.dtype.kind not in "iu":
        raise UserError(f"cross_entropy targets must be class indices (integers), got {target.dtype.name}")
    logits = input if input.ndim > 1 else input.reshape(1, -1)
    expected = logits.shape[:1] + logits.shape[2:]
    if tuple(target.shape if input.ndim > 1 else (1,) + target.shape) != expected:
        raise UserError(
            f"cross_entropy: target shape {target.shape} does not match input shape {input.shape} "
            f"(expected {expected if input.ndim > 1 else ()})"
        )
    classes = logits.shape[1]
    if valid_classes is not None and not 1 <= valid_classes <= classes:
        raise UserError(
            f"cross_entropy: valid_classes must be between 1 and the {classes} classes of the input, "
            f"got {valid_classes}"
        )
    if logits.ndim > 2:  # (N, C, d...) -> (N*d..., C)
        logits = logits.permute(0, *range(2, logits.ndim), 1).reshape(-1, classes)
    flat_target = target.reshape(-1).to(dtypes.int64)
    attrs = {
        "ignore_index": ignore_index,
        "label_smoothing": float(label_smoothing),
        "valid_classes": classes if valid_classes is None else int(valid_classes),
        "float_loss": float_loss,
    }
    losses = apply(
        opspec.CROSS_ENTROPY,
        (logits, flat_target),
        attrs,
        flat_target.shape,
        dtypes.float32 if float_loss else logits.dtype,
    )
    if reduction == "none":
        return losses.reshape(target.shape)
    total = reduce_sum(losses)
    if reduction == "sum":
        return total
    count = reduce_sum(ew.ne(flat_target, ignore_index))
    return ew.div(total, ew.cast(count, total.dtype))


def linear_cross_entropy(
    input: Tensor,
    weight: Tensor | None,
    target: Tensor,
    ignore_index: int = -100,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
    valid_classes: int | None = None,
) -> Tensor:
    """cross_entropy(input @ weight^T, target) with float32 losses: an output layer and its loss in one
    op. input (N, C), weight (V, C), target (N,) class indices; reduction "mean" or "sum";
    valid_classes as in cross_entropy (a vocabulary padded with rows the classes leave out).

    Where the device has a fused kernel (backend `fused_linear_cross_entropy`), the (N, V) logits are
    never held whole: chunk by chunk of rows the kernel computes the logits, the losses and their
    gradient, and the gradients of input and weight, all in the forward pass; the backward pass only
    scales them. With a 50k vocabulary that is the largest tensor of a small model's training step,
    twice (logits and their gradient). Elsewhere (and with no gradient to compute): the matmul and
    cross_entropy, the same numbers.
    """
    if _amp.state.on:
        args = (input, weight, target, ignore_index, reduction, label_smoothing, valid_classes)
        return _amp.call("linear_cross_entropy", linear_cross_entropy, args, {})
    if reduction not in ("mean", "sum"):
        raise UserError(f"linear_cross_entropy reduction must be 'mean' or 'sum', got {reduction!r}")
    if input.ndim != 2 or weight.ndim != 2 or input.shape[1] != weight.shape[1]:
        raise UserError(
            f"linear_cross_entropy: input (N, C) and weight (V, C) do not fit: {input.shape}, {weight.shape}"
        )
    if target.shape != input.shape[:1]:
        raise UserError(f"linear_cross_entropy: target shape {target.shape} does not match input {input.shape}")

    wants_grad = is_grad_enabled() and (input.requires_grad or weight.requires_grad)
    fused = (
        wants_grad
        and weight.dtype == input.dtype
        and get_backend(input.device).has_kernel("linear_cross_entropy")
        and get_backend(input.device).fused_linear_cross_entropy(input.dtype.np)
    )
    if not fused:
        return cross_entropy(
            input @ weight.mT,
            target,
            ignore_index=ignore_index,
            reduction=reduction,
            label_smoothing=label_smoothing,
            valid_classes=valid_classes,
            dtype=dtypes.float32,
        )
    _float_input(input, "linear_cross_entropy")
    if not 0.0 <= label_smoothing <= 1.0:
        raise UserError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
    classes = weight.shape[0]
    if valid_classes is not None and not 1 <= valid_classes <= classes:
        raise UserError(
            f"linear_cross_entropy: valid_classes must be between 1 and the {classes} rows of the "
            f"weight, got {valid_classes}"
        )
    if target.dtype.kind not in "iu":
        raise UserError(f"cross_entropy targets must be class indices (integers), got {target.dtype.name}")
    flat_target = target.to(dtypes.int64)
    attrs = {
        "ignore_index": ignore_index,
        "label_smoothing": float(label_smoothing),
        "valid_classes": classes if valid_classes is None else int(valid_classes),
    }
    acc = dtypes.float64 if input.dtype == dtypes.float64 else dtypes.float32
    total, _, _ = apply(
        opspec.LINEAR_CROSS_ENTROPY,
        (input, weight, flat_target),
        attrs,
        ((), input.shape, weight.shape),
        (acc, input.dtype, weight.dtype),
        n_outputs=3,
        saves_outputs=True,
    )
    if reduction == "sum":
        return total
    count = reduce_sum(ew.ne(flat_target, ignore_index))
    return ew.div(total, ew.cast(count, total.dtype))


@gradient(opspec.LINEAR_CROSS_ENTROPY)
def _linear_cross_entropy_grad(node, out, g):
    # The kernel computed the gradients of the loss sum in the forward pass; scale them by g (a
    # scalar) in g's precision, then back to each input's dtype.
    dx, dw = node.saved
    return tuple(ew.cast(ew.mul(ew.cast(d, g.dtype), g), d.dtype) for d in (dx, dw)) + (None,)


@gradient(opspec.CROSS_ENTROPY)
def _cross_entropy_grad(node, out, g):
    logits, target = node.inputs
    return apply(opspec.CROSS_ENTROPY_BACKWARD, (logits, target, g), node.attrs, logits.shape, logits.dtype), None


def nll_loss(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    size_average: bool | None = None,
    ignore_index: int = -100,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    reduction = legacy_reduction(size_average, reduce, reduction)
    if _amp.state.on:
        args = (input, target, weight)
        return _amp.call("nll_loss", nll_loss, args, {"ignore_index": ignore_index, "reduction": reduction})
    from gradcraft.ops import class_weights

    return class_weights.nll_loss(input, target, weight, ignore_index, reduction)


def mse_loss(
    input: Tensor,
    target: Tensor,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
    weight: Tensor | None = None,
) -> Tensor:
    reduction = legacy_reduction(size_average, reduce, reduction)
    if _amp.state.on:
        return _amp.call("mse_loss", mse_loss, (input, target), {"reduction": reduction, "weight": weight})
    from gradcraft.ops.reduce import mean

    diff = ew.sub(input, target)
    sq = ew.mul(diff, diff)
    if weight is not None:
        return weighted_reduce(sq, weight, reduction, "mse_loss")
    return {"mean": mean, "sum": reduce_sum}[reduction](sq) if reduction != "none" else sq
