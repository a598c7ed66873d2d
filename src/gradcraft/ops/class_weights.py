"""nll_loss, and cross_entropy with class weights or probability targets, composed from public ops.

PyTorch's definitions (aten's LossNLL.cpp): for class indices, loss_n = -weight[y_n] * x[n, y_n] (0
where y_n is ignore_index), and "mean" divides by the sum of the weights of the counted targets.
cross_entropy is nll_loss of log_softmax; label smoothing adds eps / C times the (weighted) sum over
classes, normalised by the same weight sum. For probability targets (a float target shaped like
the input), loss_n = -sum_c weight_c * q_nc * log_softmax(x)_nc, with q smoothed towards uniform,
and "mean" divides by the number of samples (not by the weights). Class dimension: 1, or 0 for an
unbatched (C,) input.
"""

from __future__ import annotations

from gradcraft.errors import RuntimeError_, UserError, ValueError_


def _check_weight(weight, classes: int, op: str):
    if weight is not None and (weight.ndim != 1 or weight.shape[0] != classes):
        raise RuntimeError_(
            f"{op}: weight tensor should be defined either for all {classes} classes or no classes "
            f"but got weight tensor of shape: {list(weight.shape)}"
        )


def _class_view(weight, ndim: int):
    """weight (C,) shaped to broadcast along the class dimension (1) of an ndim-d input."""
    return weight.reshape((1, -1) + (1,) * (ndim - 2))


def nll_loss(input, target, weight=None, ignore_index: int = -100, reduction: str = "mean"):
    if reduction not in ("mean", "sum", "none"):
        raise ValueError_(f"{reduction} is not a valid value for reduction")
    if target.dtype.kind not in "iu":
        raise RuntimeError_(f"expected scalar type Long but found {target.dtype.name}")
    unbatched = input.ndim == 1
    if unbatched:
        if target.ndim != 0:
            raise ValueError_(f"Expected target size [], got {list(target.shape)}")
        input, target = input.unsqueeze(0), target.unsqueeze(0)
    if input.ndim < 1 or tuple(target.shape) != tuple(input.shape[:1] + input.shape[2:]):
        raise ValueError_(f"Expected target size {list(input.shape[:1] + input.shape[2:])}, got {list(target.shape)}")
    classes = input.shape[1]
    _check_weight(weight, classes, "nll_loss")
    valid = target != ignore_index
    safe = target.masked_fill(~valid, 0).long()
    picked = -input.gather(1, safe.unsqueeze(1)).squeeze(1)
    if weight is not None:
        w = weight[safe.reshape(-1)].reshape(tuple(safe.shape)).to(input.dtype)
        w = w * valid.to(input.dtype)
    else:
        w = valid.to(input.dtype)
    losses = picked * w
    if reduction == "none":
        return losses.squeeze(0) if unbatched else losses
    total = losses.sum()
    return total if reduction == "sum" else total / w.sum()


def cross_entropy(input, target, weight=None, ignore_index: int = -100, reduction: str = "mean", label_smoothing=0.0):
    """F.cross_entropy for what the fused kernel does not take: class weights, probability targets."""
    if reduction not in ("mean", "sum", "none"):
        raise ValueError_(f"{reduction} is not a valid value for reduction")
    if not 0.0 <= label_smoothing <= 1.0:
        raise UserError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
    if not input.dtype.is_floating_point:
        raise UserError(f"cross_entropy needs a floating-point tensor, got {input.dtype.name}")
    class_dim = 0 if input.ndim == 1 else 1
    classes = input.shape[class_dim]
    _check_weight(weight, classes, "cross_entropy")
    logp = input.log_softmax(class_dim)
    if target.dtype.is_floating_point:
        return _probability_targets(logp, target, weight, reduction, label_smoothing, class_dim)
    loss = nll_loss(logp, target, weight, ignore_index, reduction)
    if label_smoothing == 0.0:
        return loss
    batched_logp = logp.unsqueeze(0) if class_dim == 0 else logp
    batched_target = target.unsqueeze(0) if class_dim == 0 else target
    valid = batched_target != ignore_index
    if weight is not None:
        smooth = -(batched_logp * _class_view(weight.to(logp.dtype), batched_logp.ndim)).sum(1)
    else:
        smooth = -batched_logp.sum(1)
    smooth = smooth * valid.to(smooth.dtype)
    if reduction == "mean":
        if weight is not None:
            safe = batched_target.masked_fill(~valid, 0).long().reshape(-1)
            smooth = smooth.sum() / (weight[safe].to(logp.dtype) * valid.reshape(-1).to(logp.dtype)).sum()
        else:
            smooth = smooth.sum() / valid.sum().to(smooth.dtype)
    elif reduction == "sum":
        smooth = smooth.sum()
    elif class_dim == 0:
        smooth = smooth.squeeze(0)
    return (1 - label_smoothing) * loss + smooth * (label_smoothing / classes)


def _probability_targets(logp, target, weight, reduction: str, label_smoothing: float, class_dim: int):
    if tuple(target.shape) != tuple(logp.shape):
        raise RuntimeError_(
            f"Expected target of the same shape as the input for probability targets, got {list(target.shape)} "
            f"for input {list(logp.shape)}"
        )
    classes = logp.shape[class_dim]
    if label_smoothing > 0.0:
        target = target * (1 - label_smoothing) + label_smoothing / classes
    terms = logp * target
    if weight is not None:
        w = weight.to(logp.dtype)
        terms = terms * (w if class_dim == 0 else _class_view(w, logp.ndim))
    if reduction == "none":
        return -terms.sum(class_dim)
    total = -terms.sum()
    return total if reduction == "sum" else total / (logp.numel() // classes)
