"""nn.MultiheadAttention, as in torch.nn: in_proj_weight/in_proj_bias (or q/k/v_proj_weight when
kdim or vdim differ from embed_dim), out_proj, bias_k/bias_v, add_zero_attn; boolean or additive
attn_mask ((L, S) or (N * num_heads, L, S)) and key_padding_mask ((N, S)); the averaged or per-head
attention weights. Composed from linear, matmul, softmax and dropout."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from gradcraft import dtypes
from gradcraft.errors import RuntimeError_, ValueError_
from gradcraft.nn import functional as F
from gradcraft.nn import init
from gradcraft.nn.layers import Linear
from gradcraft.nn.module import Module, Parameter
from gradcraft.ops.creation import zeros
from gradcraft.ops.movement import cat

from gradcraft.typing import DTypeLike, Device

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor


class NonDynamicallyQuantizableLinear(Linear):
    """Linear under the name PyTorch gives MultiheadAttention's output projection (its printout)."""


def additive_mask(mask: Tensor | None, dtype) -> Tensor | None:
    """A boolean mask (True: not allowed) as 0 / -inf to add to the scores; a float mask as it is."""
    if mask is None:
        return None
    if mask.dtype == dtypes.bool_:
        return zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(mask, float("-inf"))
    if not mask.dtype.is_floating_point:
        raise ValueError_(f"only bool and floating types of masks are supported, got {mask.dtype}")
    return mask.to(dtype)


class MultiheadAttention(Module):
    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        add_bias_kv: bool = False,
        add_zero_attn: bool = False,
        kdim: int | None = None,
        vdim: int | None = None,
        batch_first: bool = False,
        device: Device = None,
        dtype: DTypeLike = None,
    ) -> None:
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError_(
                f"embed_dim and num_heads must be greater than 0, got embed_dim={embed_dim} and num_heads={num_heads} "
                "instead"
            )
        super().__init__()
        self.embed_dim = embed_dim
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads, self.dropout, self.batch_first = num_heads, dropout, batch_first
        self.head_dim = embed_dim // num_heads
        if self.head_dim * num_heads != embed_dim:
            raise ValueError_("embed_dim must be divisible by num_heads")
        make = lambda *shape: Parameter(zeros(shape, device=device, dtype=dtype))  # noqa: E731
        if not self._qkv_same_embed_dim:
            self.q_proj_weight = make(embed_dim, embed_dim)
            self.k_proj_weight = make(embed_dim, self.kdim)
            self.v_proj_weight = make(embed_dim, self.vdim)
            self.in_proj_weight = None
        else:
            self.in_proj_weight = make(3 * embed_dim, embed_dim)
            self.q_proj_weight = self.k_proj_weight = self.v_proj_weight = None
        self.in_proj_bias = make(3 * embed_dim) if bias else None
        self.out_proj = NonDynamicallyQuantizableLinear(embed_dim, embed_dim, bias=bias, device=device, dtype=dtype)
        if add_bias_kv:
            self.bias_k, self.bias_v = make(1, 1, embed_dim), make(1, 1, embed_dim)
        else:
            self.bias_k = self.bias_v = None
        self.add_zero_attn = add_zero_attn
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            for w in (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight):
                init.xavier_uniform_(w)
        if self.in_proj_bias is not None:
            init.constant_(self.in_proj_bias, 0.0)
            init.constant_(self.out_proj.bias, 0.0)
        if self.bias_k is not None:
            init.xavier_normal_(self.bias_k)
            init.xavier_normal_(self.bias_v)

    def _projections(self, query: Tensor, key: Tensor, value: Tensor) -> tuple:
        e = self.embed_dim
        b = self.in_proj_bias
        bq, bk, bv = (None, None, None) if b is None else (b[:e], b[e : 2 * e], b[2 * e :])
        if self._qkv_same_embed_dim:
            w = self.in_proj_weight
            wq, wk, wv = w[:e], w[e : 2 * e], w[2 * e :]
        else:
            wq, wk, wv = self.q_proj_weight, self.k_proj_weight, self.v_proj_weight
        return F.linear(query, wq, bq), F.linear(key, wk, bk), F.linear(value, wv, bv)

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        key_padding_mask: Tensor | None = None,
        need_weights: bool = True,
        attn_mask: Tensor | None = None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ) -> tuple:
        batched = query.ndim == 3
        if query.ndim not in (2, 3) or key.ndim != query.ndim or value.ndim != query.ndim:
            raise RuntimeError_(
                f"query, key and value should all be 2-D (unbatched) or 3-D (batched), got {query.ndim}-D, "
                f"{key.ndim}-D and {value.ndim}-D"
            )
        if is_causal and attn_mask is None:
            raise RuntimeError_("Need attn_mask if specifying the is_causal hint")
        if self.batch_first and batched:
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        if not batched:  # (L, E) -> (L, 1, E); the key padding mask (S,) -> (1, S)
            query, key, value = (t.unsqueeze(1) for t in (query, key, value))
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        tgt_len, bsz, embed_dim = query.shape
        if embed_dim != self.embed_dim:
            raise RuntimeError_(f"was expecting embedding dimension of {self.embed_dim}, but got {embed_dim}")
        if key.shape[:2] != value.shape[:2]:
            raise RuntimeError_(f"key shape {key.shape} does not match value shape {value.shape}")
        q, k, v = self._projections(query, key, value)  # (L, N, E), (S, N, E), (S, N, E)
        float_dtype = q.dtype
        attn_mask = additive_mask(attn_mask, float_dtype)
        key_padding_mask = additive_mask(key_padding_mask, float_dtype)
        if attn_mask is not None:
            src_len = key.shape[0]
            if attn_mask.ndim == 2:
                if tuple(attn_mask.shape) != (tgt_len, src_len):
                    raise RuntimeError_(
                        f"The shape of the 2D attn_mask is {attn_mask.shape}, but should be {(tgt_len, src_len)}."
                    )
                attn_mask = attn_mask.unsqueeze(0)
            elif attn_mask.ndim == 3:
                if tuple(attn_mask.shape) != (bsz * self.num_heads, tgt_len, src_len):
                    raise RuntimeError_(
                        f"The shape of the 3D attn_mask is {attn_mask.shape}, but should be "
                        f"{(bsz * self.num_heads, tgt_len, src_len)}."
                    )
            else:
                raise RuntimeError_(f"attn_mask's dimension {attn_mask.ndim} is not supported")
        if self.bias_k is not None:
            k = cat([k, self.bias_k.expand(1, bsz, embed_dim)])
            v = cat([v, self.bias_v.expand(1, bsz, embed_dim)])
            attn_mask = F.pad(attn_mask, (0, 1)) if attn_mask is not None else None
            key_padding_mask = F.pad(key_padding_mask, (0, 1)) if key_padding_mask is not None else None
        heads, hd = self.num_heads, self.head_dim
        # (L, N, E) -> (N, heads, L, hd)
        q = q.reshape(tgt_len, bsz, heads, hd).permute(1, 2, 0, 3)
        k = k.reshape(k.shape[0], bsz, heads, hd).permute(1, 2, 0, 3)
        v = v.reshape(v.shape[0], bsz, heads, hd).permute(1, 2, 0, 3)
        if self.add_zero_attn:
            k = cat([k, zeros(bsz, heads, 1, hd, dtype=k.dtype, device=k.device)], 2)
            v = cat([v, zeros(bsz, heads, 1, hd, dtype=v.dtype, device=v.device)], 2)
            attn_mask = F.pad(attn_mask, (0, 1)) if attn_mask is not None else None
            key_padding_mask = F.pad(key_padding_mask, (0, 1)) if key_padding_mask is not None else None
        src_len = k.shape[2]
        scores = (q * (1.0 / math.sqrt(hd))) @ k.transpose(-2, -1)  # (N, heads, L, S)
        if attn_mask is not None:  # (1 or N * heads, L, S): one mask for all, or one per sample and head
            per_head = attn_mask.shape[0] > 1
            scores = scores + attn_mask.reshape(bsz if per_head else 1, heads if per_head else 1, tgt_len, src_len)
        if key_padding_mask is not None:
            if tuple(key_padding_mask.shape) != (bsz, src_len):
                raise RuntimeError_(
                    f"expecting key_padding_mask shape of {(bsz, src_len)}, but got {key_padding_mask.shape}"
                )
            scores = scores + key_padding_mask.reshape(bsz, 1, 1, src_len)
        weights = F.softmax(scores, dim=-1)
        if self.dropout > 0.0 and self.training:
            weights = F.dropout(weights, self.dropout, True)
        out = (weights @ v).permute(2, 0, 1, 3).reshape(tgt_len, bsz, embed_dim)
        out = self.out_proj(out)
        if not batched:
            out = out.squeeze(1)
        elif self.batch_first:
            out = out.transpose(0, 1)
        if not need_weights:
            return out, None
        if average_attn_weights:
            weights = weights.mean(1)
        return out, (weights if batched else weights.squeeze(0))
