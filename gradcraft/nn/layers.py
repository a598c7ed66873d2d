"""Layers: Linear, Embedding, LayerNorm, RMSNorm, Dropout."""

from __future__ import annotations

from typing import TYPE_CHECKING
from gradcraft.typing import DTypeLike, Device, Shape

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor

from gradcraft.nn import functional as F
from gradcraft.nn import init
from gradcraft.nn.module import Module, Parameter
from gradcraft.ops.creation import ones, zeros


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

    def forward(self, x: Tensor) -> Tensor:
        # Under mixed precision the fp32 master weights are cast to the activations' dtype.
        bias = self.bias.to(x.dtype) if self.bias is not None else None
        return F.linear(x, self.weight.to(x.dtype), bias)


class Embedding(Module):
    def __init__(self, num_embeddings: int, embedding_dim: int, device: Device = None, dtype: DTypeLike = None) -> None:
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.weight = Parameter(zeros(num_embeddings, embedding_dim, device=device, dtype=dtype))
        init.normal_(self.weight)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}"

    def forward(self, idx: Tensor) -> Tensor:
        return F.embedding(idx, self.weight)


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
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        # without the affine transform there are no parameters at all (PyTorch registers both as None)
        affine = elementwise_affine
        self.weight = Parameter(ones(self.normalized_shape, device=device, dtype=dtype)) if affine else None
        self.bias = Parameter(zeros(self.normalized_shape, device=device, dtype=dtype)) if affine and bias else None

    def extra_repr(self) -> str:
        return (
            f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, "
            f"bias={self.bias is not None}"
        )

    def forward(self, x: Tensor) -> Tensor:
        weight = self.weight.to(x.dtype) if self.weight is not None else None
        bias = self.bias.to(x.dtype) if self.bias is not None else None
        return F.layer_norm(x, self.normalized_shape, weight, bias, self.eps)


class RMSNorm(Module):
    def __init__(
        self, normalized_shape: Shape, eps: float | None = None, device: Device = None, dtype: DTypeLike = None
    ) -> None:
        super().__init__()
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps = eps
        self.weight = Parameter(ones(self.normalized_shape, device=device, dtype=dtype))

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine=True"

    def forward(self, x: Tensor) -> Tensor:
        return F.rms_norm(x, self.normalized_shape, self.weight.to(x.dtype), self.eps)


class Dropout(Module):
    """F.dropout in training mode, the identity in eval mode. Masks come from the device's dropout
    state (gradcraft/ops/creation.py): a loop that replays a captured step calls
    `advance_dropout(device)` at the start of the step, or every replay draws the same masks."""

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        self.p = p

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace=False"

    def forward(self, x: Tensor) -> Tensor:
        return F.dropout(x, self.p, self.training)
