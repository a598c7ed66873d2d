"""Fused neural-network ops, each one kernel forward and one fused kernel backward.

softmax, log_softmax, layer_norm, rms_norm, embedding, dropout, rotary embedding,
and the composites built from them (linear, norm_linear, one_hot). The cross-entropy
family lives in ops/cross_entropy.py, attention in ops/attention.py.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING
from gradcraft.backend import opspec
from gradcraft.device import get_backend
from gradcraft.tensor import Tensor
from gradcraft.typing import DTypeLike, Device, Shape

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor

from gradcraft import dtypes
from gradcraft.amp import policy as _amp
from gradcraft.errors import UserError
from gradcraft.ops import elementwise as ew
from gradcraft.ops.creation import dropout_stream, ones, zeros
from gradcraft.ops.function import apply, gradient, is_grad_enabled
from gradcraft.ops.reduce import normalize_dim


def _float_input(x, op):
    if not x.dtype.is_floating_point:
        raise UserError(f"{op} needs a floating-point tensor, got {x.dtype.name}; convert with .float()")


# ------------------------------------------------------------------ softmax family


def _softmax_family(op: str, x: Tensor, dim: int, dtype: DTypeLike) -> Tensor:
    """softmax or log_softmax along dim, computed in dtype when given (cast first, as in PyTorch)."""
    if dtype is not None:
        x = ew.cast(x, dtype)
    _float_input(x, op)
    return apply(op, (x,), {"axis": normalize_dim(dim, x.ndim)}, x.shape, x.dtype)


def softmax(input: Tensor, dim: int = -1, dtype: DTypeLike = None) -> Tensor:
    if _amp.state.on:
        return _amp.call("softmax", softmax, (input, dim), {"dtype": dtype})
    return _softmax_family(opspec.SOFTMAX, input, dim, dtype)


def log_softmax(input: Tensor, dim: int = -1, dtype: DTypeLike = None) -> Tensor:
    if _amp.state.on:
        return _amp.call("log_softmax", log_softmax, (input, dim), {"dtype": dtype})
    return _softmax_family(opspec.LOG_SOFTMAX, input, dim, dtype)


# Both gradients are one fused kernel of the output and its gradient (softmax_backward, log_softmax_backward).
@gradient(opspec.SOFTMAX)
def _softmax_grad(node, out, g):
    return (apply(opspec.SOFTMAX_BACKWARD, (out, g), node.attrs, g.shape, g.dtype),)


@gradient(opspec.LOG_SOFTMAX)
def _log_softmax_grad(node, out, g):
    return (apply(opspec.LOG_SOFTMAX_BACKWARD, (out, g), node.attrs, g.shape, g.dtype),)


# ------------------------------------------------------------------ normalization


def _norm_dims(x, normalized_shape, op, **params):
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if x.shape[x.ndim - len(shape) :] != shape:
        raise UserError(f"{op}: normalized_shape {shape} does not match the trailing dimensions of {x.shape}")
    for name, p in params.items():
        if p is not None and tuple(p.shape) != shape:
            raise UserError(f"{op}: {name} has shape {tuple(p.shape)}; it must be the normalized shape {shape}")
    return shape


def layer_norm(
    input: Tensor, normalized_shape: Shape, weight: Tensor | None = None, bias: Tensor | None = None, eps: float = 1e-5
) -> Tensor:
    if _amp.state.on:
        return _amp.call("layer_norm", layer_norm, (input, normalized_shape, weight, bias, eps), {})
    _float_input(input, "layer_norm")
    shape = _norm_dims(input, normalized_shape, "layer_norm", weight=weight, bias=bias)
    weight = weight if weight is not None else ones(shape, dtype=input.dtype, device=input.device)
    bias = bias if bias is not None else zeros(shape, dtype=input.dtype, device=input.device)
    attrs = {"eps": float(eps), "n_dims": len(shape)}
    return apply(opspec.LAYER_NORM, (input, weight, bias), attrs, input.shape, input.dtype)


@gradient(opspec.LAYER_NORM)
def _layer_norm_grad(node, out, g):
    x, weight, bias = node.inputs
    return apply(
        opspec.LAYER_NORM_BACKWARD,
        (x, weight, g),
        node.attrs,
        (x.shape, weight.shape, bias.shape),
        (x.dtype, weight.dtype, bias.dtype),
        n_outputs=3,
    )


def _rms_norm_eps(dtype) -> float:
    """F.rms_norm's default eps, as PyTorch's: the machine epsilon of the computing float (float32 for halves)."""
    import numpy as np

    return float(np.finfo(np.float32 if dtype in (dtypes.bfloat16, dtypes.float16) else dtype.np).eps)


def rms_norm(input: Tensor, normalized_shape: Shape, weight: Tensor | None = None, eps: float | None = None) -> Tensor:
    """F.rms_norm: x / sqrt(mean(x^2) + eps) * weight; eps defaults to the dtype's machine epsilon."""
    if _amp.state.on:
        return _amp.call("rms_norm", rms_norm, (input, normalized_shape, weight, eps), {})
    _float_input(input, "rms_norm")
    shape = _norm_dims(input, normalized_shape, "rms_norm", weight=weight)
    if eps is None:
        eps = _rms_norm_eps(input.dtype)
    weight = weight if weight is not None else ones(shape, dtype=input.dtype, device=input.device)
    attrs = {"eps": float(eps), "n_dims": len(shape)}
    return apply(opspec.RMS_NORM, (input, weight), attrs, input.shape, input.dtype)


@gradient(opspec.RMS_NORM)
def _rms_norm_grad(node, out, g):
    x, weight = node.inputs
    return apply(
        opspec.RMS_NORM_BACKWARD,
        (x, weight, g),
        node.attrs,
        (x.shape, weight.shape),
        (x.dtype, weight.dtype),
        n_outputs=2,
    )


# ------------------------------------------------------------------ embedding, dropout, rope


def embedding(
    input: Tensor,
    weight: Tensor | None,
    padding_idx: int | None = None,
    max_norm: float | None = None,
    norm_type: float = 2.0,
    scale_grad_by_freq: bool = False,
    sparse: bool = False,
) -> Tensor:
    """Rows of weight; positions holding padding_idx read their row but send it no gradient."""
    if input.dtype.kind not in "iu":
        raise UserError(f"embedding indices must be integers, got {input.dtype.name}")
    if weight.ndim != 2:
        raise UserError(f"embedding weight must be 2-D (num_embeddings, dim), got {weight.shape}")
    if max_norm is not None or scale_grad_by_freq or sparse:
        raise UserError("embedding: max_norm, scale_grad_by_freq and sparse are not supported")
    out = apply(opspec.EMBEDDING, (weight, input.to(dtypes.int64)), {}, input.shape + weight.shape[1:], weight.dtype)
    if padding_idx is None:
        return out
    padding_idx = embedding_padding_idx(padding_idx, weight.shape[0])
    return ew.where(ew.ne(input, padding_idx).unsqueeze(-1), out, out.detach())


def embedding_padding_idx(padding_idx: int, num_embeddings: int) -> int:
    if not -num_embeddings <= padding_idx < num_embeddings:
        raise UserError(f"embedding: padding_idx {padding_idx} must be within num_embeddings ({num_embeddings})")
    return padding_idx + num_embeddings if padding_idx < 0 else padding_idx


@gradient(opspec.EMBEDDING)
def _embedding_grad(node, out, g):
    weight, idx = node.inputs
    grad = apply(opspec.EMBEDDING_BACKWARD, (idx, g), {"num_embeddings": weight.shape[0]}, weight.shape, g.dtype)
    return grad, None


def dropout(input, p: float = 0.5, training: bool = True):
    """Zero each element with probability p and scale the rest by 1/(1-p).

    The mask is a function of the device's dropout state [seed, counter], read from device memory when
    the kernel runs, and of this node's stream id (ops/creation.py explains both). The backward node
    reads the same state with the same stream, so it regenerates exactly the same mask."""
    if not 0.0 <= p <= 1.0:
        raise UserError(f"dropout probability must be in [0, 1], got {p}")
    if not training or p == 0.0:
        return input
    if p == 1.0:
        return ew.mul(input, 0.0)
    state, stream = dropout_stream(input.device)
    return apply(opspec.DROPOUT, (input, state), {"p": float(p), "stream": stream}, input.shape, input.dtype)


@gradient(opspec.DROPOUT)
def _dropout_grad(node, out, g):
    _, state = node.inputs
    return apply(opspec.DROPOUT, (g, state), node.attrs, g.shape, g.dtype), None


def rope_frequencies(
    seq_len: int, head_dim: int, base: float = 10000.0, device: Device = None, start: int = 0
) -> Tensor:
    """(cos, sin) tables of shape (seq_len, head_dim // 2) for positions start..start+seq_len-1."""
    import numpy as np

    inv_freq = 1.0 / (base ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    angles = np.outer(np.arange(start, start + seq_len, dtype=np.float64), inv_freq)
    return (
        Tensor(np.cos(angles).astype(np.float32), device=device),
        Tensor(np.sin(angles).astype(np.float32), device=device),
    )


def rotary_embedding(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate (x[..., i], x[..., i + D/2]) by position-dependent angles (the LLaMA / GPT-NeoX layout).

    x: (..., T, D); cos, sin: (T, D/2), usually from `rope_frequencies`. cos and sin are constants:
    no gradient flows into them.
    """
    if x.shape[-1] % 2:
        raise UserError(f"rotary embedding needs an even head dimension, got {x.shape[-1]}")
    if cos.shape != (x.shape[-2], x.shape[-1] // 2) or sin.shape != cos.shape:
        raise UserError(
            f"rotary embedding: cos/sin must have shape {(x.shape[-2], x.shape[-1] // 2)}, "
            f"got {cos.shape} and {sin.shape}"
        )
    # The tables in the kernels' accumulator type (float32 for half-precision x): no rounding to x's
    # type, and no cast back inside the kernel (two small kernels per call, four per layer).
    tables = dtypes.float64 if x.dtype == dtypes.float64 else dtypes.float32
    return apply(opspec.ROPE, (x, ew.cast(cos, tables), ew.cast(sin, tables)), {"inverse": False}, x.shape, x.dtype)


@gradient(opspec.ROPE)
def _rope_grad(node, out, g):
    x, cos, sin = node.inputs
    return apply(opspec.ROPE, (g, cos, sin), {"inverse": not node.attrs["inverse"]}, g.shape, g.dtype), None, None


# ------------------------------------------------------------------ attention: ops/attention.py

from gradcraft.ops.attention import scaled_dot_product_attention  # noqa: E402,F401  (F.* keeps its home here)


# ------------------------------------------------------------------ composites


def linear(input: Tensor, weight: Tensor | None, bias: Tensor | None = None) -> Tensor:
    if _amp.state.on:
        return _amp.call("linear", linear, (input, weight, bias), {})
    # A decoding step's row: the bias added in the product's kernel. Only a bias of one value per
    # output (PyTorch's also broadcasts a (1,) bias, and norm_linear's kernel reads N values).
    if (
        bias is not None
        and weight.ndim == 2
        and input.ndim >= 1
        and input.shape[-1] == weight.shape[1]
        and bias.shape == (weight.shape[0],)
        and input.dtype == weight.dtype == bias.dtype
    ):
        return norm_linear(input, weight, bias)
    out = input @ weight.mT
    return out + bias if bias is not None else out


NORMS = (None, "rms_norm", "layer_norm")
ACTIVATIONS = (None, "gelu", "gelu_tanh", "swiglu")


def norm_linear(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    *,
    residual: Tensor | None = None,
    norm: str | None = None,
    norm_weight: Tensor | None = None,
    norm_bias: Tensor | None = None,
    eps: float | None = 1e-5,
    activation: str | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    """activation(norm(input + residual) @ weight^T + bias) for input (..., K), weight (N, K).

    residual: added to input first; then the result is (y, input + residual), the residual stream
    the next layer continues from. norm: "rms_norm" (norm_weight) or "layer_norm" (norm_weight,
    norm_bias), over the last axis, with eps; None: no norm. activation: "gelu", "gelu_tanh"
    (GELU's tanh form), "swiglu" (silu(h[..., :N/2]) * h[..., N/2:]) or None.

    A decoding step multiplies one row by each weight matrix: each product is a read of the weight,
    a few microseconds, and the residual add, the norm before it and the bias and activation after
    it cost as much again as separate kernels. Where the device has the fused kernel for the case
    (backend `norm_linear_supported`: on a GPU, one row, kernels/gemv.cu) the chain is one launch;
    everywhere else, and whenever a gradient is needed, it is composed from the ops it stands for
    (the same kernels as the unfused model, the same numbers). The fused kernel has no gradient."""
    if norm not in NORMS or activation not in ACTIVATIONS:
        raise UserError(f"norm_linear: norm must be one of {NORMS} and activation one of {ACTIVATIONS}")
    K, N = input.shape[-1], weight.shape[0]
    if weight.ndim != 2 or weight.shape[1] != K:
        raise UserError(f"norm_linear: weight must be (N, {K}) for input {input.shape}, got {weight.shape}")
    if residual is not None and residual.shape != input.shape:
        raise UserError(f"norm_linear: residual {residual.shape} must match input {input.shape}")
    if bias is not None and bias.shape != (N,):
        raise UserError(f"norm_linear: bias must be ({N},) for an ({N}, {K}) weight, got {bias.shape}")
    for name, t in (("norm_weight", norm_weight), ("norm_bias", norm_bias)):
        if t is not None and t.shape != (K,):
            raise UserError(f"norm_linear: {name} must be ({K},) for input {input.shape}, got {t.shape}")
    if (norm is None) != (norm_weight is None) or (norm_bias is not None and norm != "layer_norm"):
        raise UserError("norm_linear: norm_weight goes with a norm, norm_bias with layer_norm only")
    if activation == "swiglu" and N % 2:
        raise UserError(f"norm_linear: swiglu needs an even output width, got {N}")
    tensors = [t for t in (input, residual, norm_weight, norm_bias, weight, bias) if t is not None]
    if any(t.dtype != input.dtype for t in tensors):
        raise UserError("norm_linear: every tensor must share the input's dtype")
    if eps is None:  # F.rms_norm's and F.layer_norm's own defaults
        eps = _rms_norm_eps(input.dtype) if norm == "rms_norm" else 1e-5
    rows = math.prod(input.shape[:-1])
    grad = is_grad_enabled() and any(t.requires_grad for t in tensors)
    if not grad and get_backend(input.device).norm_linear_supported(rows, N, K, input.dtype.np, activation):
        out = N // 2 if activation == "swiglu" else N
        attrs = {
            "residual": residual is not None,
            "norm": norm,
            "eps": float(eps),
            "norm_bias": norm_bias is not None,
            "bias": bias is not None,
            "activation": activation,
        }
        flat = [t.reshape(rows, K) if t is input or t is residual else t for t in tensors]
        shape = input.shape[:-1] + (out,)
        if residual is None:
            return apply(opspec.NORM_LINEAR, flat, attrs, (rows, out), input.dtype).reshape(shape)
        y, s = apply(opspec.NORM_LINEAR, flat, attrs, ((rows, out), (rows, K)), (input.dtype, input.dtype), n_outputs=2)
        return y.reshape(shape), s.reshape(input.shape)
    s = input + residual if residual is not None else input
    if norm == "rms_norm":
        h = rms_norm(s, (K,), norm_weight, eps)
    elif norm == "layer_norm":
        h = layer_norm(s, (K,), norm_weight, norm_bias, eps)
    else:
        h = s
    h = _product_and_bias(h, weight, bias)
    if activation == "swiglu":
        h = swiglu(h)
    elif activation is not None:
        h = gelu(h, approximate="tanh" if activation == "gelu_tanh" else "none")
    return (h, s) if residual is not None else h


def _product_and_bias(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """x @ weight^T + bias. Where the device says so (backend `fused_linear_bias`: cuBLASLt on a GPU),
    one linear_bias op: the bias is added in the product's epilogue, and in the backward pass the
    weight gradient's product also sums the bias gradient; a matmul and an add would write and read
    the (rows, N) output once more, and the add's gradient read the output gradient once more."""
    if bias is None:
        return x @ weight.mT
    backend = get_backend(x.device)
    if (
        x.ndim >= 2
        and x.dtype == weight.dtype == bias.dtype
        and backend.has_kernel("linear_bias")
        and backend.fused_linear_bias(x.dtype.np)
    ):
        rows = x.reshape(-1, x.shape[-1])
        out = apply(opspec.LINEAR_BIAS, (rows, weight, bias), {}, (rows.shape[0], weight.shape[0]), x.dtype)
        return out.reshape(x.shape[:-1] + (weight.shape[0],))
    return x @ weight.mT + bias


@gradient(opspec.LINEAR_BIAS)
def _linear_bias_grad(node, out, g):
    x, weight, bias = node.inputs
    dx = g @ weight if x.requires_grad else None
    if not (weight.requires_grad or bias.requires_grad):
        return dx, None, None
    dw, db = apply(
        opspec.LINEAR_BIAS_BACKWARD, (g, x), {}, (weight.shape, bias.shape), (weight.dtype, bias.dtype), n_outputs=2
    )
    return dx, dw, db


def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    from gradcraft.ops.creation import arange

    if tensor.dtype.kind not in "iu":
        raise UserError(f"one_hot needs integer class indices, got {tensor.dtype.name}")
    if num_classes < 0:
        num_classes = int(tensor.max().item()) + 1
    classes = arange(num_classes, device=tensor.device)
    return ew.eq(tensor.unsqueeze(-1), classes).to(dtypes.int64)


def gelu(input, approximate: str = "none"):
    return ew.gelu(input, approximate)


def silu(input):
    return ew.silu(input)


def swiglu(input: Tensor) -> Tensor:
    """silu(gate) * up, where input = [gate | up] along the last axis (a SwiGLU MLP's two projections
    from one matmul): one fused kernel each way instead of two slices, a SiLU and a multiply, and a
    gradient written whole instead of in two halves."""
    _float_input(input, "swiglu")
    if input.ndim == 0 or input.shape[-1] % 2:
        raise UserError(f"swiglu needs an even number of features in the last axis, got shape {input.shape}")
    return apply(opspec.SWIGLU, (input,), {}, input.shape[:-1] + (input.shape[-1] // 2,), input.dtype)


@gradient(opspec.SWIGLU)
def _swiglu_grad(node, out, g):
    return (apply(opspec.SWIGLU_BACKWARD, (node.inputs[0], g), {}, node.inputs[0].shape, g.dtype),)


def relu(input):
    return ew.relu(input)
