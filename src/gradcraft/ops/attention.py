"""Scaled dot-product attention: which kernels compute it, and their gradients.

Three ways to the same function, picked per call:
- "flash": one kernel that never stores the (T, S) weights, keeping each query's log-sum-exp for a
  backward pass that recomputes them tile by tile (`flash_attention` / `flash_attention_backward`).
  Chosen wherever the device has a fast kernel for the case (CUDA, bf16/fp16, the head dims of
  backend/cuda/flash_attention.py, no explicit mask).
- "explicit" (save_weights=True, or dropout): scores by a matmul, a fused masked softmax, a matmul;
  the weights are kept for the backward pass (PyTorch's math path).
- "sdpa": one fused op whose backward recomputes the weights (the rest: masks, inference; and
  save_weights=True too where the device prefers it: the CPU's C kernels for float32 without a mask,
  which skip the masked half of causal attention).

`sdpa_kernel("flash" | "math" | "auto")` overrides the choice, as torch.nn.attention.sdpa_kernel does
(tests force "flash" on the CPU, whose NumPy kernels are the reference of the CUDA ones).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor

import contextlib
import math
import threading

from gradcraft import dtypes
from gradcraft.backend import opspec
from gradcraft.device import get_backend
from gradcraft.errors import UserError
from gradcraft.ops import elementwise as ew
from gradcraft.ops.creation import dropout_stream
from gradcraft.ops.function import apply, gradient
from gradcraft.amp import policy as _amp

_choice = threading.local()
CHOICES = ("auto", "flash", "math")


@contextlib.contextmanager
def sdpa_kernel(choice: str):
    """Within the block, attention uses `choice`: "flash" (the flash kernels on any device; an error
    where a case has none), "math" (never flash) or "auto" (flash where the device has a fast kernel)."""
    if choice not in CHOICES:
        raise UserError(f"sdpa_kernel: choice must be one of {', '.join(CHOICES)}, got {choice!r}")
    previous = getattr(_choice, "value", "auto")
    _choice.value = choice
    try:
        yield
    finally:
        _choice.value = previous


def _use_flash(query, value, has_mask: bool) -> bool:
    choice = getattr(_choice, "value", "auto")
    if choice == "math":
        return False
    D, Dv = query.shape[-1], value.shape[-1]
    fast = not has_mask and get_backend(query.device).flash_attention_supported(query.dtype.np, D, Dv)
    if choice == "flash" and not fast:
        if has_mask:
            raise UserError("flash attention takes is_causal and window, not attn_mask")
        if query.device != "cpu" or not get_backend(query.device).has_kernel("flash_attention"):
            # (the CPU's reference kernels take every case)
            raise UserError(
                f"no flash attention kernel on {query.device} for {query.dtype.name} with head dim "
                f"{D}; use bfloat16/float16 and a supported head dim, or sdpa_kernel('auto')"
            )
        return True
    return fast


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    window: int | None = None,
    save_weights: bool = False,
) -> Tensor:
    """softmax(q k^T * scale + mask) v, fused, as F.scaled_dot_product_attention.

    query (B, H, T, D), key (B, Hkv, S, D), value (B, Hkv, S, Dv). With H > Hkv (grouped-query
    attention) each KV head serves H / Hkv query heads. `is_causal` aligns queries with the last T
    keys (so it also serves decoding with a KV cache; PyTorch aligns to the first T when T != S).
    `window=w` lets query i see only keys in [i-w+1, i] (sliding-window attention).
    attn_mask: bool (True = may attend) or additive float, broadcastable to (B, H, T, S).
    dropout_p: drop each attention weight with this probability (as PyTorch, whenever it is > 0: pass
    0.0 in evaluation). The mask is a function of the device's dropout state and this call's place in
    the step (ops/creation.py), drawn inside the flash kernels tile by tile (backend/philox.py), so the
    backward pass regenerates it; p is applied in steps of 2^-16.

    Flash attention runs wherever the device has a kernel for the case (see the module docstring).
    Otherwise save_weights=False: one fused kernel pair that keeps no (T, S) weights for the backward
    pass and recomputes them there; save_weights=True (and always with dropout): explicit attention,
    with the weights kept for the backward pass (PyTorch's math path): more memory, less compute.
    """
    if _amp.state.on:
        return _amp.call(
            "scaled_dot_product_attention",
            scaled_dot_product_attention,
            (query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, window, save_weights),
            {},
        )
    if not 0.0 <= dropout_p < 1.0:
        raise UserError(f"scaled_dot_product_attention: dropout_p must be in [0, 1), got {dropout_p}")
    for name, t in (("query", query), ("key", key), ("value", value)):
        if t.ndim != 4:
            raise UserError(f"scaled_dot_product_attention: {name} must be (B, H, T, D), got {t.shape}")
    B, H, T, D = query.shape
    Hkv, S = key.shape[1], key.shape[2]
    if key.shape[0] != B or value.shape[:3] != key.shape[:3] or key.shape[3] != D:
        raise UserError(
            f"scaled_dot_product_attention: shapes do not fit: q {query.shape}, k {key.shape}, v {value.shape}"
        )
    if H % Hkv:
        raise UserError(f"grouped-query attention needs query heads ({H}) divisible by key/value heads ({Hkv})")
    if window is not None and window < 1:
        raise UserError(f"attention window must be >= 1, got {window}")
    if key.dtype != query.dtype or value.dtype != query.dtype:
        raise UserError(
            f"scaled_dot_product_attention: query, key and value must share a dtype, got "
            f"{query.dtype.name}, {key.dtype.name}, {value.dtype.name}"
        )
    attrs = {
        "scale": float(scale if scale is not None else 1.0 / math.sqrt(D)),
        "causal": bool(is_causal),
        "window": window,
    }
    drop = None
    if dropout_p:
        state, stream = dropout_stream(query.device)
        drop = _Dropout(state, float(dropout_p), stream, T, S)
    return _attend(query, key, value, attn_mask, attrs, save_weights, drop)


class _Dropout:
    """Attention dropout of one call: the device's state tensor, p, the stream id, and the whole
    attention's (T, S), which number the mask's elements (sub-blocks keep the whole's numbering)."""

    def __init__(self, state, p: float, stream: int, T: int, S: int):
        self.state, self.p, self.stream, self.T, self.S = state, p, stream, T, S

    def attrs(self, i0: int = 0, j0: int = 0) -> dict:
        return {"p": self.p, "stream": self.stream, "T": self.T, "S": self.S, "i0": i0, "j0": j0}


def _attend(query, key, value, attn_mask, attrs, save_weights: bool, drop, i0: int = 0, j0: int = 0):
    """Attention of queries i0.. and keys j0.. of the whole (drop numbers its mask by them)."""
    B, H, T, D = query.shape
    S = key.shape[2]
    window = attrs["window"]
    if _use_flash(query, value, attn_mask is not None):
        stats_dtype = dtypes.float64 if query.dtype == dtypes.float64 else dtypes.float32  # the accumulator's
        inputs, flash_attrs = (query, key, value), attrs
        if drop is not None:
            inputs += (drop.state,)
            flash_attrs = {**attrs, "dropout_p": drop.p, "stream": drop.stream}
        out, _ = apply(
            opspec.FLASH_ATTENTION,
            inputs,
            flash_attrs,
            ((B, H, T, value.shape[3]), (B, H, T)),
            (query.dtype, stats_dtype),
            n_outputs=2,
            saves_outputs=True,
        )
        return out
    if window is not None and attn_mask is None and attrs["causal"] and T > 2 * window:
        return _windowed_blocks(query, key, value, attrs, save_weights, drop, i0, j0)
    inputs = [query, key, value]
    if attn_mask is not None:
        ew.broadcast_shape(attn_mask.shape, (B, H, T, S), "attention mask")
        inputs.append(attn_mask if attn_mask.dtype == dtypes.bool_ else ew.cast(attn_mask, query.dtype))
    if save_weights and attn_mask is None and get_backend(query.device).recomputing_attention_preferred(query.dtype.np):
        save_weights = False  # the fused kernels are faster here even though they recompute the weights
    if save_weights or drop is not None:
        return _explicit_attention(query, key, value, inputs[3:], attrs, drop, i0, j0)
    return apply(opspec.SDPA, tuple(inputs), attrs, (B, H, T, value.shape[3]), query.dtype)


def _windowed_blocks(q, k, v, attrs, save_weights: bool, drop, i0: int, j0: int):
    """Sliding-window causal attention without a flash kernel, block by block: the queries of each block
    of `window` positions see only the keys from `window - 1` before the block to its end, so the
    (T, S) blocks wholly outside the window are never computed (O(T w) instead of O(T^2)).
    q: (B, H, T, D); k, v: (B, Hkv, S, D) whose last T positions are the queries' own."""
    from gradcraft.ops.movement import cat

    window = attrs["window"]
    T, S = q.shape[2], k.shape[2]
    offset = S - T  # keys before the first query (a KV cache)
    blocks = []
    for start in range(0, T, window):
        end = min(start + window, T)
        first_key = max(0, offset + start - window + 1)
        blocks.append(
            _attend(
                q[:, :, start:end],
                k[:, :, first_key : offset + end],
                v[:, :, first_key : offset + end],
                None,
                attrs,
                save_weights,
                drop,
                i0 + start,
                j0 + first_key,
            )
        )
    return cat(blocks, dim=2)


def _explicit_attention(query, key, value, mask, attrs, drop=None, i0: int = 0, j0: int = 0):
    B, H, T, D = query.shape
    Hkv, S, Dv = key.shape[1], key.shape[2], value.shape[3]
    G = H // Hkv
    # Query heads grouped over the key/value head they share: (B, Hkv, G, T, D) @ (B, Hkv, 1, D, S)
    scores = query.reshape(B, Hkv, G, T, D) @ key.reshape(B, Hkv, 1, S, D).mT  # (B, Hkv, G, T, S)
    if mask:
        mask = [mask[0].expand(B, H, T, S).contiguous().reshape(B, Hkv, G, T, S)]
    weights = apply(opspec.MASKED_SOFTMAX, (scores, *mask), attrs, scores.shape, scores.dtype)
    if drop is not None:  # (B, Hkv, G) flattens to the B * H head rows in order
        weights = apply(
            opspec.ATTENTION_DROPOUT, (weights, drop.state), drop.attrs(i0, j0), weights.shape, weights.dtype
        )
    out = weights @ value.reshape(B, Hkv, 1, S, Dv)  # (B, Hkv, G, T, Dv)
    return out.reshape(B, H, T, Dv)


@gradient(opspec.ATTENTION_DROPOUT)
def _attention_dropout_grad(node, out, g):
    return apply(opspec.ATTENTION_DROPOUT, (g, node.inputs[1]), node.attrs, g.shape, g.dtype), None


@gradient(opspec.MASKED_SOFTMAX)
def _masked_softmax_grad(node, out, g):
    grad = apply(opspec.MASKED_SOFTMAX_BACKWARD, (out, g), {"scale": node.attrs["scale"]}, g.shape, g.dtype)
    return (grad,) + (None,) * (len(node.inputs) - 1)


@gradient(opspec.SDPA)
def _sdpa_grad(node, out, g):
    q, k, v, *mask = node.inputs
    dq, dk, dv = apply(
        opspec.SDPA_BACKWARD,
        (q, k, v, g, *mask),
        node.attrs,
        (q.shape, k.shape, v.shape),
        (q.dtype, k.dtype, v.dtype),
        n_outputs=3,
    )
    return (dq, dk, dv) + (None,) * len(mask)


@gradient(opspec.FLASH_ATTENTION)
def _flash_attention_grad(node, out, g):
    q, k, v, *state = node.inputs  # state: the dropout state, with dropout
    lse = node.saved[0]
    grads = apply(
        opspec.FLASH_ATTENTION_BACKWARD,
        (q, k, v, out, lse, g, *state),
        node.attrs,
        (q.shape, k.shape, v.shape),
        (q.dtype, k.dtype, v.dtype),
        n_outputs=3,
    )
    return tuple(grads) + (None,) * len(state)
