"""More of torch.nn, composed from public ops: PReLU (F.prelu), GLU (F.glu), F.gumbel_softmax,
EmbeddingBag (F.embedding_bag), Softmax2d, Bilinear (F.bilinear)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from gradcraft.errors import RuntimeError_, UserError, ValueError_
from gradcraft.nn import init as nn_init  # PReLU's `init` parameter (PyTorch's name) would hide `init`
from gradcraft.nn.module import Module, Parameter
from gradcraft.ops.creation import full, tensor, zeros
from gradcraft.ops.elementwise import where
from gradcraft.ops.function import no_grad
from gradcraft.typing import Device, DTypeLike

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor


def prelu(input: Tensor, weight: Tensor) -> Tensor:
    """max(0, x) + weight * min(0, x), one weight per channel (dimension 1) or one for all."""
    if weight.numel() != 1:
        if input.ndim < 2 or input.shape[1] != weight.numel():
            raise RuntimeError_(
                f"Mismatch of parameter numbers and input channel size. Found parameter numbers = {weight.numel()} "
                f"and channel size = {input.shape[1] if input.ndim > 1 else 1}."
            )
        weight = weight.reshape((1, -1) + (1,) * (input.ndim - 2))
    return where(input > 0, input, weight * input)


class PReLU(Module):
    def __init__(
        self, num_parameters: int = 1, init: float = 0.25, device: Device = None, dtype: DTypeLike = None
    ) -> None:
        super().__init__()
        self.num_parameters, self.init = num_parameters, init
        self.weight = Parameter(full((num_parameters,), init, device=device, dtype=dtype))

    def reset_parameters(self) -> None:
        nn_init.constant_(self.weight, self.init)

    def forward(self, input: Tensor) -> Tensor:
        return prelu(input, self.weight)

    def extra_repr(self) -> str:
        return f"num_parameters={self.num_parameters}"


def glu(input: Tensor, dim: int = -1) -> Tensor:
    """a * sigmoid(b), a and b the two halves of input along dim."""
    if input.ndim == 0:
        raise RuntimeError_("glu does not support scalars because halving size must be even")
    size = input.shape[dim]
    if size % 2:
        raise RuntimeError_(f"Halving dimension must be even, but dimension {dim % input.ndim} is size {size}")
    a, b = input.chunk(2, dim)
    return a * b.sigmoid()


class GLU(Module):
    def __init__(self, dim: int = -1) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, input: Tensor) -> Tensor:
        return glu(input, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


def gumbel_softmax(logits: Tensor, tau: float = 1.0, hard: bool = False, eps: float = 1e-10, dim: int = -1) -> Tensor:
    """softmax((logits + g) / tau) with g ~ Gumbel(0, 1); hard: the one-hot of its argmax in the forward
    pass with the soft sample's gradient (straight through), as PyTorch's."""
    from gradcraft.ops.creation import rand_like

    uniform = rand_like(logits).clamp(min=1e-20, max=1.0)
    gumbels = -(-uniform.log()).log()  # -log(E), E ~ Exponential(1)
    y_soft = ((logits + gumbels) / tau).softmax(dim)
    if not hard:
        return y_soft
    index = y_soft.argmax(dim, keepdim=True)
    y_hard = zeros(tuple(logits.shape), dtype=logits.dtype, device=logits.device).scatter(dim, index, 1.0)
    return y_hard - y_soft.detach() + y_soft


def _bags(input, offsets, include_last_offset: bool):
    """(bag id of each index, number of bags) for a 1-D input cut at offsets."""
    starts = np.asarray(offsets.numpy() if hasattr(offsets, "numpy") else offsets, dtype=np.int64).reshape(-1)
    n = input.shape[0]
    if include_last_offset:
        starts = starts[:-1]
    if len(starts) and starts[0] != 0:
        raise RuntimeError_(
            "offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to start from position 0. "
            f"However, got {starts[0]}"
        )
    if len(starts) and starts[-1] > n:
        raise RuntimeError_(
            f"offsets[-1] can not be greater than input's length ({n}), but got offsets[-1] of {starts[-1]}"
        )
    bag = np.searchsorted(starts, np.arange(n), side="right") - 1
    return bag, len(starts)


def embedding_bag(
    input: Tensor,
    weight: Tensor,
    offsets: Tensor | None = None,
    max_norm: float | None = None,
    norm_type: float = 2,
    scale_grad_by_freq: bool = False,
    mode: str = "mean",
    sparse: bool = False,
    per_sample_weights: Tensor | None = None,
    include_last_offset: bool = False,
    padding_idx: int | None = None,
) -> Tensor:
    """Sums, means or maxima of bags of embeddings: the rows of a 2-D input, or a 1-D input cut at offsets."""
    if mode not in ("sum", "mean", "max"):
        raise ValueError_(f"mode has to be one of sum, mean or max, but got {mode}")
    if max_norm is not None or scale_grad_by_freq or sparse:
        raise UserError("embedding_bag: max_norm, scale_grad_by_freq and sparse are not supported")
    if per_sample_weights is not None and mode != "sum":
        raise NotImplementedError(
            f"embedding_bag: per_sample_weights was not None. per_sample_weights is only supported for mode='sum' "
            f"(got mode='{mode}'). Please open a feature request on GitHub."
        )
    if input.ndim == 2:
        if offsets is not None:
            raise ValueError_(
                "if input is 2D, then offsets has to be None, as input is treated is a mini-batch of "
                "fixed length sequences."
            )
        rows, length = input.shape
        bag = np.repeat(np.arange(rows), length)
        n_bags = rows
        flat = input.reshape(-1)
        weights = per_sample_weights.reshape(-1) if per_sample_weights is not None else None
    elif input.ndim == 1:
        if offsets is None:
            raise ValueError_("offsets has to be a 1D Tensor but got None")
        bag, n_bags = _bags(input, offsets, include_last_offset)
        flat, weights = input, per_sample_weights
    else:
        raise ValueError_(f"input has to be 1D or 2D Tensor, but got Tensor of dimension {input.ndim}")
    indices = flat.numpy().astype(np.int64)
    keep = np.ones(len(indices), dtype=bool) if padding_idx is None else indices != padding_idx
    from gradcraft.ops.nn import embedding

    rows = embedding(flat, weight)
    dim = weight.shape[1]
    if mode == "max":
        out = []
        for b in range(n_bags):
            members = np.nonzero((bag == b) & keep)[0]
            if len(members):
                out.append(rows.index_select(0, tensor(members)).amax(0))
            else:
                out.append(zeros(dim, dtype=weight.dtype, device=weight.device))
        from gradcraft.ops.movement import stack

        return stack(out) if out else zeros((0, dim), dtype=weight.dtype, device=weight.device)
    mask = tensor(keep.astype(np.float64), dtype=weight.dtype, device=weight.device).unsqueeze(1)
    contributions = rows * mask
    if weights is not None:
        contributions = contributions * weights.unsqueeze(1)
    bag_ids = tensor(bag.astype(np.int64), device=weight.device)
    total = zeros((n_bags, dim), dtype=weight.dtype, device=weight.device).index_add(0, bag_ids, contributions)
    if mode == "sum":
        return total
    counts = np.bincount(bag[keep], minlength=n_bags).astype(np.float64)
    return total / tensor(np.maximum(counts, 1.0).reshape(-1, 1), dtype=weight.dtype, device=weight.device)


class EmbeddingBag(Module):
    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        mode: str = "mean",
        sparse: bool = False,
        _weight: Tensor | None = None,
        include_last_offset: bool = False,
        padding_idx: int | None = None,
        device: Device = None,
        dtype: DTypeLike = None,
    ) -> None:
        super().__init__()
        if max_norm is not None or scale_grad_by_freq or sparse:
            raise UserError("EmbeddingBag: max_norm, scale_grad_by_freq and sparse are not supported")
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise AssertionError("padding_idx must be within num_embeddings")
            padding_idx = padding_idx % num_embeddings
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.max_norm, self.norm_type, self.scale_grad_by_freq = max_norm, norm_type, scale_grad_by_freq
        self.mode, self.sparse, self.include_last_offset = mode, sparse, include_last_offset
        self.padding_idx = padding_idx
        if _weight is not None:
            self.weight = Parameter(_weight)
            return
        self.weight = Parameter(zeros((num_embeddings, embedding_dim), device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn_init.normal_(self.weight)
        if self.padding_idx is not None:
            with no_grad():
                self.weight[self.padding_idx] = 0.0

    def forward(self, input: Tensor, offsets: Tensor | None = None, per_sample_weights: Tensor | None = None) -> Tensor:
        return embedding_bag(
            input,
            self.weight,
            offsets,
            mode=self.mode,
            per_sample_weights=per_sample_weights,
            include_last_offset=self.include_last_offset,
            padding_idx=self.padding_idx,
        )

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}, mode={self.mode!r}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        return s


class Softmax2d(Module):
    """softmax over the channels of (N, C, H, W) or (C, H, W)."""

    def forward(self, input: Tensor) -> Tensor:
        if input.ndim not in (3, 4):
            raise ValueError_(f"Softmax2d: expected input to be 3D or 4D, got {input.ndim}D instead")
        return input.softmax(-3)


def bilinear(input1: Tensor, input2: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """y_k = x1^T W_k x2 (+ b_k) over the last dimension; the leading dimensions are batch."""
    if input1.shape[:-1] != input2.shape[:-1]:
        raise RuntimeError_(
            f"bilinear(): input batch dimensions do not match: got {list(input1.shape[:-1])} and "
            f"{list(input2.shape[:-1])}"
        )
    lead = tuple(input1.shape[:-1])
    x1 = input1.reshape(-1, input1.shape[-1])
    x2 = input2.reshape(-1, input2.shape[-1])
    out = ((x1.unsqueeze(0) @ weight) * x2.unsqueeze(0)).sum(-1).transpose(0, 1)  # (K, B, J) -> (B, K)
    if bias is not None:
        out = out + bias
    return out.reshape(lead + (weight.shape[0],))


class Bilinear(Module):
    def __init__(
        self,
        in1_features: int,
        in2_features: int,
        out_features: int,
        bias: bool = True,
        device: Device = None,
        dtype: DTypeLike = None,
    ) -> None:
        super().__init__()
        self.in1_features, self.in2_features, self.out_features = in1_features, in2_features, out_features
        self.weight = Parameter(zeros((out_features, in1_features, in2_features), device=device, dtype=dtype))
        self.bias = Parameter(zeros(out_features, device=device, dtype=dtype)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1 / self.weight.shape[1] ** 0.5
        nn_init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            nn_init.uniform_(self.bias, -bound, bound)

    def forward(self, input1: Tensor, input2: Tensor) -> Tensor:
        return bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (
            f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
            f"out_features={self.out_features}, bias={self.bias is not None}"
        )
