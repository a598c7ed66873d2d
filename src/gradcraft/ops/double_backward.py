"""Gradients of gradients: what backward(create_graph=True) and autograd.grad(create_graph=True) need.

Most gradient rules are written in differentiable ops, so recording them (the engine does, with
create_graph) gives the second derivative for free. The exceptions are the rules that call one fused
kernel (`softmax_backward`, `gelu_backward`, ...). Here:

- the single-output backward kernels get gradient rules of their own, written in ops (so third and
  higher derivatives follow too);
- the rules whose kernel has several outputs (layer_norm, rms_norm, a linear layer's bias product)
  have a composed equivalent, `COMPOSED[op]`, which the engine uses instead when create_graph is set;
- the ops in `NOT_TWICE` (fused attention, mixture-of-experts routing, the fused output layer) have
  neither: differentiating their gradient is refused with one line rather than silently wrong.
"""

from __future__ import annotations

import math

from gradcraft.backend import opspec
from gradcraft.errors import UserError
from gradcraft.ops import elementwise as ew
from gradcraft.ops.function import apply, gradient

NOT_TWICE = {
    opspec.SDPA: "scaled_dot_product_attention (write the attention with matmul and softmax)",
    opspec.FLASH_ATTENTION: "scaled_dot_product_attention (write the attention with matmul and softmax)",
    opspec.MASKED_SOFTMAX: "the fused masked softmax of attention",
    opspec.MOE_PERMUTE: "moe_permute",
    opspec.MOE_UNPERMUTE: "moe_unpermute",
    opspec.SWIGLU: "swiglu",
    opspec.NORM_LINEAR: "the fused normalization + linear layer",
    opspec.LINEAR_CROSS_ENTROPY: "linear_cross_entropy (use cross_entropy(input @ weight.T, target))",
}


def second_order_rule(op: str, rules: dict):
    """The gradient rule to record for op when create_graph is set."""
    if op in NOT_TWICE:
        raise UserError(f"create_graph=True: the gradient of {NOT_TWICE[op]} cannot be differentiated again")
    return COMPOSED.get(op) or rules[op]


# ------------------------------------------------------------ rules of the single-output kernels


@gradient(opspec.SOFTMAX_BACKWARD)
def _softmax_backward_grad(node, out, gr):
    # r = y * (g - sum(g * y)) along the axis
    y, g = node.inputs
    axis = node.attrs["axis"]
    s = (g * y).sum(axis, keepdim=True)
    dy = gr * (g - s) - (gr * y).sum(axis, keepdim=True) * g if y.requires_grad else None
    dg = apply(opspec.SOFTMAX_BACKWARD, (y, gr), node.attrs, gr.shape, gr.dtype) if g.requires_grad else None
    return dy, dg


@gradient(opspec.LOG_SOFTMAX_BACKWARD)
def _log_softmax_backward_grad(node, out, gr):
    # r = g - exp(y) * sum(g) along the axis
    y, g = node.inputs
    axis = node.attrs["axis"]
    p = y.exp()
    dy = -gr * p * g.sum(axis, keepdim=True) if y.requires_grad else None
    dg = gr - (gr * p).sum(axis, keepdim=True) if g.requires_grad else None
    return dy, dg


def _gelu_second(x, approximate: str):
    """d^2 gelu / dx^2."""
    if approximate == "tanh":
        c, k = math.sqrt(2.0 / math.pi), 0.044715
        u = c * (x + k * x * x * x)
        du = c * (1.0 + 3.0 * k * x * x)
        t = u.tanh()
        return (1.0 - t * t) * (du - x * t * du * du + 0.5 * x * (6.0 * c * k * x))
    pdf = (-0.5 * x * x).exp() * (1.0 / math.sqrt(2.0 * math.pi))
    return pdf * (2.0 - x * x)


@gradient(opspec.GELU_BACKWARD)
def _gelu_backward_grad(node, out, gr):
    x, g = node.inputs
    dx = gr * g * _gelu_second(x, node.attrs.get("approximate", "none")) if x.requires_grad else None
    dg = apply(opspec.GELU_BACKWARD, (x, gr), node.attrs, gr.shape, gr.dtype) if g.requires_grad else None
    return dx, dg


@gradient(opspec.SILU_BACKWARD)
def _silu_backward_grad(node, out, gr):
    x, g = node.inputs
    s = x.sigmoid()
    dx = gr * g * (s * (1.0 - s) * (2.0 + x * (1.0 - 2.0 * s))) if x.requires_grad else None
    dg = apply(opspec.SILU_BACKWARD, (x, gr), {}, gr.shape, gr.dtype) if g.requires_grad else None
    return dx, dg


@gradient(opspec.EMBEDDING_BACKWARD)
def _embedding_backward_grad(node, out, gr):
    # r[idx[i]] += g[i]: linear in g, whose gradient gathers the rows back
    idx, g = node.inputs
    return None, apply(opspec.EMBEDDING, (gr, idx), {}, g.shape, gr.dtype)


@gradient(opspec.CROSS_ENTROPY_BACKWARD)
def _cross_entropy_backward_grad(node, out, gr):
    # r = g * mask * (softmax(logits) - q), q the (smoothed) one-hot target
    from gradcraft.ops.creation import ones_like
    from gradcraft.ops.nn import softmax

    logits, target, g = node.inputs
    if node.attrs["valid_classes"] != logits.shape[1]:
        raise UserError("create_graph=True: cross_entropy with valid_classes cannot be differentiated twice")
    dg = None
    if g.requires_grad:
        ones = ones_like(g)
        unit = apply(opspec.CROSS_ENTROPY_BACKWARD, (logits, target, ones), node.attrs, logits.shape, logits.dtype)
        dg = (gr * unit).sum(-1)
    dlogits = None
    if logits.requires_grad:
        mask = ew.cast(ew.ne(target, node.attrs["ignore_index"]), g.dtype)
        p = softmax(logits, -1)
        dlogits = apply(opspec.SOFTMAX_BACKWARD, (p, gr * (g * mask).unsqueeze(-1)), {"axis": 1}, gr.shape, gr.dtype)
    return dlogits, None, dg


# ------------------------------------------------------------ composed rules of the multi-output kernels


def _norm_axes(x, n_dims: int):
    return tuple(range(x.ndim - n_dims, x.ndim)), tuple(range(x.ndim - n_dims))


def _layer_norm_composed(node, out, g):
    x, w, b = node.inputs
    axes, lead = _norm_axes(x, node.attrs["n_dims"])
    xc = x - x.mean(axes, keepdim=True)
    rstd = ((xc * xc).mean(axes, keepdim=True) + node.attrs["eps"]).rsqrt()
    xhat = xc * rstd
    dxhat = g * w
    dx = rstd * (dxhat - dxhat.mean(axes, keepdim=True) - xhat * (dxhat * xhat).mean(axes, keepdim=True))
    return dx, (g * xhat).sum(lead), g.sum(lead)


def _rms_norm_composed(node, out, g):
    x, w = node.inputs
    axes, lead = _norm_axes(x, node.attrs["n_dims"])
    r = ((x * x).mean(axes, keepdim=True) + node.attrs["eps"]).rsqrt()
    xhat = x * r
    dxhat = g * w
    dx = r * (dxhat - xhat * (dxhat * xhat).mean(axes, keepdim=True))
    return dx, (g * xhat).sum(lead)


def _linear_bias_composed(node, out, g):
    x, w, b = node.inputs
    rows_g = g.reshape(-1, g.shape[-1])
    dw = rows_g.mT @ x.reshape(-1, x.shape[-1]) if w.requires_grad else None
    db = rows_g.sum(0) if b.requires_grad else None
    return (g @ w if x.requires_grad else None), dw, db


def _relu_composed(node, out, g):
    # the mask as sign(out) (out >= 0): the same values, and the gradient stays connected to the
    # input (with a zero second derivative) as PyTorch's threshold_backward is
    return (g * out.sign(),)


COMPOSED = {
    opspec.LAYER_NORM: _layer_norm_composed,
    opspec.RMS_NORM: _rms_norm_composed,
    opspec.LINEAR_BIAS: _linear_bias_composed,
    opspec.RELU: _relu_composed,
}
