"""Batch and group normalisation (F.batch_norm, F.group_norm) composed from reductions and
elementwise ops, no kernels of their own; channel-wise dropout (F.dropout1d/2d) from one dropout
mask per channel. The running statistics are updated in place with values cut from the graph, so a
training step's graph never reaches into an earlier step's."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor

from gradcraft.errors import RuntimeError_, ValueError_
from gradcraft.ops import creation
from gradcraft.ops import nn as _nn


def _channel_shape(x: Tensor) -> tuple:
    return (1, x.shape[1]) + (1,) * (x.ndim - 2)


def batch_norm(
    input: Tensor,
    running_mean: Tensor | None,
    running_var: Tensor | None,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    """Normalise each channel (dimension 1) over the batch and spatial dimensions: with the batch's
    statistics in training (and the running ones moved toward them, the variance unbiased), with the
    running statistics otherwise."""
    x = input
    if x.ndim < 2:
        raise ValueError_(f"batch_norm: expected an input of at least 2 dimensions, got shape {x.shape}")
    channels = x.shape[1]
    for name, t in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight), ("bias", bias)):
        if t is not None and t.numel() != channels:
            raise RuntimeError_(f"batch_norm: {name} should contain {channels} elements not {t.numel()}")
    shape = _channel_shape(x)
    dims = (0,) + tuple(range(2, x.ndim))
    if training:
        count = x.numel() // channels
        if count <= 1:
            raise ValueError_(f"Expected more than 1 value per channel when training, got input size {x.shape}")
        mean = x.mean(dims, keepdim=True)
        centred = x - mean
        var = (centred * centred).mean(dims, keepdim=True)
        if running_mean is not None:
            running_mean.copy_(running_mean * (1 - momentum) + mean.detach().reshape(channels) * momentum)
        if running_var is not None:
            unbiased = var.detach().reshape(channels) * (count / (count - 1))
            running_var.copy_(running_var * (1 - momentum) + unbiased * momentum)
    else:
        if running_mean is None or running_var is None:
            raise RuntimeError_("batch_norm: running_mean and running_var must be given when not training")
        centred = x - running_mean.reshape(shape).to(x.dtype)
        var = running_var.reshape(shape).to(x.dtype)
    y = centred * (var + eps).rsqrt()
    if weight is not None:
        y = y * weight.reshape(shape)
    if bias is not None:
        y = y + bias.reshape(shape)
    return y


def group_norm(
    input: Tensor, num_groups: int, weight: Tensor | None = None, bias: Tensor | None = None, eps: float = 1e-5
) -> Tensor:
    x = input
    if x.ndim < 2 or x.shape[1] % num_groups:
        raise RuntimeError_(
            f"group_norm: expected an input with channels divisible by num_groups={num_groups}, got shape {x.shape}"
        )
    n = x.shape[0]
    grouped = x.reshape(n, num_groups, -1)
    mean = grouped.mean(-1, keepdim=True)
    centred = grouped - mean
    var = (centred * centred).mean(-1, keepdim=True)
    y = (centred * (var + eps).rsqrt()).reshape(x.shape)
    shape = _channel_shape(x)
    if weight is not None:
        y = y * weight.reshape(shape)
    if bias is not None:
        y = y + bias.reshape(shape)
    return y


def _channel_dropout(input: Tensor, p: float, training: bool, spatial: int, op: str) -> Tensor:
    if p < 0 or p > 1:
        raise ValueError_(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0:
        return input
    batched = input.ndim == spatial + 2
    if input.ndim not in (spatial + 1, spatial + 2):
        raise RuntimeError_(f"{op}: expected a {spatial + 1}-D or {spatial + 2}-D input, got shape {input.shape}")
    lead = input.shape[: 2 if batched else 1]
    ones = creation.ones(lead + (1,) * spatial, dtype=input.dtype, device=input.device)
    return input * _nn.dropout(ones, p, True)  # one kept-and-scaled (or zero) factor per channel


def dropout1d(input: Tensor, p: float = 0.5, training: bool = True) -> Tensor:
    return _channel_dropout(input, p, training, 1, "dropout1d")


def dropout2d(input: Tensor, p: float = 0.5, training: bool = True) -> Tensor:
    return _channel_dropout(input, p, training, 2, "dropout2d")
