"""Layers: Linear, Embedding, LayerNorm, RMSNorm, Dropout."""

from __future__ import annotations

from typing import TYPE_CHECKING
from gradcraft.typing import DTypeLike, Device, Shape

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor

from gradcraft.nn import functional as F
from gradcraft.nn import init
from gradcraft.nn.module import Module, Parameter
from gradcraft.errors import UserError
from gradcraft.ops.creation import ones, zeros
from gradcraft.ops.function import no_grad
from gradcraft.ops.nn import embedding_padding_idx


class Linear(Module):
    """y = x W^T + b, W of shape (out_features, in_features) as in PyTorch."""

    def __init__(
        self, in_features: int, out_features: int, bias: bool = True, device: Device = None, dtype: DTypeLike = None
    ) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = Parameter(zeros(out_features, in_features, device=device, dtype=dtype))
        init.kaiming_uniform_linear_(self.weight, in_features)
        self.bias = Parameter(zeros(out_features, device=device, dtype=dtype)) if bias else None
        if bias:
            init.kaiming_uniform_linear_(self.bias, in_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"

    def forward(self, input: Tensor) -> Tensor:
        # Under mixed precision the fp32 master weights are cast to the activations' dtype.
        bias = self.bias.to(input.dtype) if self.bias is not None else None
        return F.linear(input, self.weight.to(input.dtype), bias)


class Embedding(Module):
    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        padding_idx: int | None = None,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        sparse: bool = False,
        _weight: Tensor | None = None,
        _freeze: bool = False,
        device: Device = None,
        dtype: DTypeLike = None,
    ) -> None:
        super().__init__()
        if max_norm is not None or scale_grad_by_freq or sparse:
            raise UserError("Embedding: max_norm, scale_grad_by_freq and sparse are not supported")
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.padding_idx = None if padding_idx is None else embedding_padding_idx(padding_idx, num_embeddings)
        self.max_norm, self.norm_type, self.scale_grad_by_freq, self.sparse = max_norm, norm_type, False, False
        if _weight is not None:
            if tuple(_weight.shape) != (num_embeddings, embedding_dim):
                raise UserError("Embedding: _weight must have shape (num_embeddings, embedding_dim)")
            self.weight = Parameter(_weight, requires_grad=not _freeze)
            return
        self.weight = Parameter(zeros(num_embeddings, embedding_dim, device=device, dtype=dtype), not _freeze)
        init.normal_(self.weight)
        if self.padding_idx is not None:  # PyTorch starts the padding row at zero
            with no_grad():
                self.weight[self.padding_idx] = 0.0

    def extra_repr(self) -> str:
        pad = "" if self.padding_idx is None else f", padding_idx={self.padding_idx}"
        return f"{self.num_embeddings}, {self.embedding_dim}{pad}"

    def forward(self, input: Tensor) -> Tensor:
        return F.embedding(input, self.weight, self.padding_idx)


class LayerNorm(Module):
    def __init__(
        self,
        normalized_shape: Shape,
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        device: Device = None,
        dtype: DTypeLike = None,
    ) -> None:
        super().__init__()
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps, self.elementwise_affine = eps, elementwise_affine
        affine = elementwise_affine
        self.weight = Parameter(ones(self.normalized_shape, device=device, dtype=dtype)) if affine else None
        self.bias = Parameter(zeros(self.normalized_shape, device=device, dtype=dtype)) if affine and bias else None

    def extra_repr(self) -> str:
        affine, bias = self.elementwise_affine, self.bias is not None
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={affine}, bias={bias}"

    def forward(self, input: Tensor) -> Tensor:
        weight = self.weight.to(input.dtype) if self.weight is not None else None
        bias = self.bias.to(input.dtype) if self.bias is not None else None
        return F.layer_norm(input, self.normalized_shape, weight, bias, self.eps)


class RMSNorm(Module):
    def __init__(
        self,
        normalized_shape: Shape,
        eps: float | None = None,
        elementwise_affine: bool = True,
        device: Device = None,
        dtype: DTypeLike = None,
    ) -> None:
        super().__init__()
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps, self.elementwise_affine = eps, elementwise_affine
        affine = elementwise_affine
        self.weight = Parameter(ones(self.normalized_shape, device=device, dtype=dtype)) if affine else None

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"

    def forward(self, x: Tensor) -> Tensor:  # PyTorch names this one x
        weight = self.weight.to(x.dtype) if self.weight is not None else None
        return F.rms_norm(x, self.normalized_shape, weight, self.eps)


class Dropout(Module):
    """F.dropout in training mode, the identity in eval mode. Masks come from the device's dropout
    state (gradcraft/ops/creation.py): a loop that replays a captured step calls
    `advance_dropout(device)` at the start of the step, or every replay draws the same masks."""

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        self.p, self.inplace = p, inplace

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"

    def forward(self, input: Tensor) -> Tensor:
        return F.dropout(input, self.p, self.training, self.inplace)
