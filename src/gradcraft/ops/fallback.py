"""The optional fused kernels computed from primitives, for a backend that lacks them.

`apply` (ops/function.py) sends an op here when the device's backend has no kernel of that name
(backend.has_kernel) and the op is one of the contract's OPTIONAL kernels. Each function is its op
spec's fallback (`@opspec.RMS_NORM.fallback`, backend/opspec.py); an op declared elsewhere may attach its
own next to its forward, and FALLBACKS reads them all from the specs. Each function takes the
kernel's inputs and attributes and returns what the kernel would, written with Tensor ops only, so
its gradient follows the primitives' own rules: a fused backward kernel is never needed where its
forward kernel is missing (the contract keeps them in pairs).

flash_attention and linear_cross_entropy have no entry: the op layer asks for them only where the
backend has them and says they are the fast way, and takes sdpa or matmul + cross_entropy otherwise.
dropout, attention_dropout and the MoE kernels stay primitives (their masks and row layouts are the
device's own).
"""

import math
from collections.abc import Mapping

from gradcraft import dtypes
from gradcraft.backend import opspec

_HALF = (dtypes.float16, dtypes.bfloat16)


def _widened(fn):
    """Compute a half-precision input in float32 and round once at the end, as the fused kernels do."""

    def run(x, *rest, **attrs):
        if x.dtype not in _HALF:
            return fn(x, *rest, **attrs)
        return fn(x.float(), *(r.float() if getattr(r, "dtype", None) in _HALF else r for r in rest), **attrs).to(
            x.dtype
        )

    run.__name__, run.__doc__ = fn.__name__, fn.__doc__
    return run


def _erf(x):
    """erf by Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7), as the CPU and C kernels compute it in float32."""
    t = 1.0 / (1.0 + 0.3275911 * x.abs())
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return x.sign() * (1.0 - poly * (-(x * x)).exp())


@opspec.GELU.fallback
@_widened
def gelu(x, approximate="none"):
    if approximate == "tanh":
        return 0.5 * x * (1.0 + (math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)).tanh())
    return 0.5 * x * (1.0 + _erf(x * (1.0 / math.sqrt(2.0))))


@opspec.SILU.fallback
@_widened
def silu(x):
    return x * x.sigmoid()


@opspec.SWIGLU.fallback
@_widened
def swiglu(h):
    gate, up = h.chunk(2, dim=-1)
    return gate * gate.sigmoid() * up


@opspec.SOFTMAX.fallback
@_widened
def softmax(x, axis):
    e = (x - x.amax(dim=axis, keepdim=True).detach()).exp()
    return e / e.sum(dim=axis, keepdim=True)


@opspec.LOG_SOFTMAX.fallback
@_widened
def log_softmax(x, axis):
    shifted = x - x.amax(dim=axis, keepdim=True).detach()
    return shifted - shifted.exp().sum(dim=axis, keepdim=True).log()


@opspec.CROSS_ENTROPY.fallback
def cross_entropy(logits, target, ignore_index, label_smoothing, valid_classes=None, float_loss=False):
    """Per-row loss of (N, C) logits against (N,) class ids (0 for ignored rows), over the first
    valid_classes columns: (1 - eps) * -log p[target] + eps * -mean(log p)."""
    from gradcraft.ops.elementwise import where
    from gradcraft.ops.nn import log_softmax as log_softmax_op

    wide = logits.float() if logits.dtype in _HALF else logits
    if valid_classes is not None and valid_classes < wide.shape[1]:
        wide = wide[:, :valid_classes]
    logp = log_softmax_op(wide, -1)
    valid = target != ignore_index
    safe = where(valid, target, 0)
    loss = -logp.take_along_dim(safe.reshape(-1, 1), dim=1).reshape(-1)
    if label_smoothing:
        loss = (1.0 - label_smoothing) * loss - label_smoothing * logp.mean(dim=1)
    loss = where(valid, loss, 0.0)
    return loss if float_loss else loss.to(logits.dtype)


def _normalized_axes(x, n_dims):
    return tuple(range(x.ndim - n_dims, x.ndim))


@opspec.LAYER_NORM.fallback
@_widened
def layer_norm(x, weight, bias, eps, n_dims):
    axes = _normalized_axes(x, n_dims)
    centered = x - x.mean(dim=axes, keepdim=True)
    return centered * ((centered * centered).mean(dim=axes, keepdim=True) + eps).rsqrt() * weight + bias


@opspec.RMS_NORM.fallback
@_widened
def rms_norm(x, weight, eps, n_dims):
    axes = _normalized_axes(x, n_dims)
    return x * ((x * x).mean(dim=axes, keepdim=True) + eps).rsqrt() * weight


@opspec.EMBEDDING.fallback
def embedding(weight, idx):
    return weight[idx]


@opspec.ROPE.fallback
@_widened
def rope(x, cos, sin, inverse):
    """Pairs (x[..., i], x[..., i + D/2]) rotated by the angles of cos/sin (T, D/2); inverse: by -angle."""
    from gradcraft.ops.movement import cat

    first, second = x.chunk(2, dim=-1)
    if inverse:
        sin = -sin
    return cat([first * cos - second * sin, second * cos + first * sin], dim=-1)


@opspec.MASKED_SOFTMAX.fallback
def masked_softmax(scores, mask=None, *, scale, causal, window):
    """softmax(scores * scale + masks) over the last axis; mask bool (True = may attend) or additive;
    causal/window align the T queries with the last T of the S keys."""
    from gradcraft.ops.creation import arange
    from gradcraft.ops.elementwise import where
    from gradcraft.ops.nn import softmax as softmax_op

    s = scores * scale
    if mask is not None:
        s = where(mask, s, float("-inf")) if mask.dtype == dtypes.bool_ else s + mask
    if causal or window:
        T, S = scores.shape[-2:]
        i = arange(T, device=scores.device).reshape(T, 1) + (S - T)
        j = arange(S, device=scores.device).reshape(1, S)
        allowed = j <= i if causal else j >= 0
        if window:
            allowed = allowed & (j > i - window)
        s = where(allowed, s, float("-inf"))
    return softmax_op(s, -1)


@opspec.SDPA.fallback
def sdpa(q, k, v, mask=None, *, scale, causal, window):
    """Explicit attention: the weights through masked_softmax, then their product with v."""
    from gradcraft.ops.attention import _explicit_attention

    attrs = {"scale": scale, "causal": causal, "window": window}
    return _explicit_attention(q, k, v, [mask] if mask is not None else [], attrs)


@opspec.KV_ATTENTION.fallback
def kv_attention(q, k, v, position, *, scale):
    """Each row's query against the filled slots of its cache, [0, min(position + 1, L)), through
    masked explicit attention (a ring is full once position >= L: every slot <= position then)."""
    from gradcraft.ops.attention import scaled_dot_product_attention
    from gradcraft.ops.creation import arange

    slots = arange(k.shape[2], device=k.device).reshape(1, -1)
    visible = (slots <= position.reshape(-1, 1)).reshape(-1, 1, 1, k.shape[2])
    return scaled_dot_product_attention(q, k, v, attn_mask=visible, scale=scale)


@opspec.SAMPLE_TOKENS.fallback
def sample_tokens(logits, temperature, top_k, top_p, uniform):
    """Where a device has no sampling kernel: the greedy rows' argmax, and -1 (the op's "sample this
    row on the host") for every other row."""
    from gradcraft.ops.creation import full_like
    from gradcraft.ops.elementwise import where

    best = logits.argmax(-1)
    return where(temperature == 0, best, full_like(best, -1))


class _Fallbacks(Mapping):
    """op name -> its spec's fallback: every spec that has one (its module attaches it with
    `@SPEC.fallback`, here or next to the op's forward)."""

    def __getitem__(self, name):
        spec = opspec.SPECS[name]
        if spec.composite is None:
            raise KeyError(name)
        return spec.composite

    def __iter__(self):
        return (name for name, spec in opspec.SPECS.items() if spec.composite is not None)

    def __len__(self):
        return sum(1 for _ in self)


FALLBACKS = _Fallbacks()

# Asked for only where the backend has them (the op layer asks the spec's gate first): no fallback needed.
CAPABILITY_GATED = frozenset(name for name, spec in opspec.SPECS.items() if spec.gate and spec.composite is None)
