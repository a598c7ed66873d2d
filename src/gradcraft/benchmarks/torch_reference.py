"""An independent PyTorch implementation of gradcraft's decoder: the oracle of tests/test_models.py and
the PyTorch side of the training benchmarks.

Written from the architecture description, not from gradcraft's code: it takes a
ModelConfig and a state dict of tensors (our parameter names) and returns logits.

Attention comes in two forms. "explicit" (the default, what the tests use as their oracle): q k^T,
mask, softmax, @ v, written out. "sdpa": torch.nn.functional.scaled_dot_product_attention, the
fused (flash / memory-efficient) kernels that PyTorch users actually train with; causal layers use
is_causal=True, sliding-window layers pass their band as a boolean mask; grouped-query attention
uses enable_gqa where the flash kernel runs and k and v repeated per query head elsewhere.
"""

import math

import numpy as np

import torch
import torch.nn.functional as F


def pad_vocab(cfg, name: str, w):
    """A weight with its vocabulary rows padded with zeros to the width gradcraft's model trains with
    (gpt2's 50257 -> 50304, as nanoGPT users do): cuBLAS then runs its fast GEMMs for the output layer
    on both sides. Callers slice the padded logits off before the loss."""
    V, padded = cfg.vocab_size, cfg.padded_vocab_size
    if name in ("tok_emb.weight", "lm_head.weight") and w.shape[0] == V < padded:
        return np.concatenate([w, np.zeros((padded - V,) + w.shape[1:], w.dtype)])
    return w


def _norm(cfg, x, w, b):
    if cfg.norm == "layernorm":
        return F.layer_norm(x, (cfg.dim,), w, b, cfg.norm_eps)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + cfg.norm_eps) * w


def _rope(x, start=0, base=10000.0):
    T, D = x.shape[-2], x.shape[-1]
    inv = 1.0 / base ** (torch.arange(0, D, 2, dtype=torch.float64, device=x.device) / D)
    ang = torch.outer(torch.arange(start, start + T, dtype=torch.float64, device=x.device), inv)
    cos, sin = torch.cat([ang.cos(), ang.cos()], -1).to(x.dtype), torch.cat([ang.sin(), ang.sin()], -1).to(x.dtype)
    rotated = torch.cat([-x[..., D // 2 :], x[..., : D // 2]], -1)
    return x * cos + rotated * sin


def _moe(cfg, P, prefix, h):
    """Top-k mixture of SwiGLU experts with a capacity limit (first come, first served in token order),
    and its auxiliary loss (moe_balance * balance + moe_zloss * z)."""
    B, T, C = h.shape
    N, E, K = B * T, cfg.n_experts, cfg.experts_per_token
    xf = h.reshape(N, C)
    logits = xf @ P[prefix + "router.weight"].T
    top_v, top_i = logits.topk(K, dim=-1)
    w = top_v.softmax(-1)
    onehot = F.one_hot(top_i.reshape(-1), E)  # assignments in token order
    position = (onehot.cumsum(0) * onehot).sum(-1) - 1
    cap = math.ceil(cfg.capacity_factor * N * K / E) if cfg.capacity_factor else N
    keep = (position < cap).reshape(N, K)
    y = torch.zeros_like(xf)
    for e in range(E):
        rows, slots = torch.where((top_i == e) & keep)
        gate, up = (xf[rows] @ P[prefix + "gate_up"][e].T).chunk(2, dim=-1)
        out = (F.silu(gate) * up) @ P[prefix + "down"][e].T * w[rows, slots, None]
        y = y.index_add(0, rows, out.to(y.dtype))  # under autocast the products come out in bf16
    probs = logits.softmax(-1)
    fraction = F.one_hot(top_i, E).sum(1).float().mean(0)
    balance = E * (fraction * probs.mean(0)).sum()
    z = (logits.logsumexp(-1) ** 2).mean()
    return y.reshape(B, T, C), cfg.moe_balance * balance + cfg.moe_zloss * z


def _sdpa(q, k, v, band=None, dropout_p=0.0):
    """Causal attention through F.scaled_dot_product_attention: q (B, H, T, D), k and v (B, Hkv, T, D).
    band: the (T, T) boolean mask of a sliding-window layer (True = may attend), or None."""
    H, Hkv = q.shape[1], k.shape[1]
    # The flash kernel (CUDA, half precision, no mask) reads each k/v head for its H / Hkv query heads
    # itself (enable_gqa). The others (fp32, a mask, the CPU) would drop to the slow math path with
    # enable_gqa, so they get k and v repeated per query head, as HF's repeat_kv does.
    flash = band is None and q.is_cuda and q.dtype in (torch.float16, torch.bfloat16)
    if H != Hkv and not flash:
        k, v = k.repeat_interleave(H // Hkv, dim=1), v.repeat_interleave(H // Hkv, dim=1)
    if band is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=H != k.shape[1], dropout_p=dropout_p)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=band, dropout_p=dropout_p)


def forward(
    cfg, params: dict, idx: torch.Tensor, with_aux: bool = False, attention: str = "explicit", train: bool = False
):
    """Logits (B, T, V); with_aux, also the sum of the mixture-of-experts auxiliary losses.
    attention: "explicit" (written out; the tests' oracle) or "sdpa" (F.scaled_dot_product_attention).
    train: training-mode dropout at the config's rates where gradcraft's Transformer (and GPT-2) puts
    it: after the embeddings (embd_dropout), on the attention weights (attn_dropout), after each
    block's attention and MLP projections (resid_dropout); False for the oracle."""

    def dropper(p):
        return (lambda t: F.dropout(t, p, training=True)) if train and p else (lambda t: t)

    drop_embd, drop_attn, drop = dropper(cfg.embd_dropout), dropper(cfg.attn_dropout), dropper(cfg.resid_dropout)
    if attention not in ("explicit", "sdpa"):
        raise ValueError(f"attention must be 'explicit' or 'sdpa', got {attention!r}")
    P = params
    B, T = idx.shape
    H, Hkv, D = cfg.n_heads, cfg.n_kv_heads, cfg.dim // cfg.n_heads
    x = P["tok_emb.weight"][idx]
    if cfg.positions == "learned":
        x = x + P["pos_emb.weight"][:T]
    x = drop_embd(x)
    mask = torch.ones(T, T, dtype=torch.bool, device=idx.device).tril()
    aux = 0.0
    for i in range(cfg.n_layers):
        p = lambda n: P.get(f"blocks.{i}.{n}")  # noqa: E731
        h = _norm(cfg, x, p("norm1.weight"), p("norm1.bias"))
        qkv = h @ p("attn.qkv.weight").T + (p("attn.qkv.bias") if cfg.bias else 0)
        q, k, v = qkv.split([H * D, Hkv * D, Hkv * D], dim=-1)
        q = q.view(B, T, H, D).transpose(1, 2)  # (B, H, T, D)
        k = k.view(B, T, Hkv, D).transpose(1, 2)  # (B, Hkv, T, D)
        v = v.view(B, T, Hkv, D).transpose(1, 2)
        if cfg.positions == "rope":
            q, k = _rope(q, base=cfg.rope_base), _rope(k, base=cfg.rope_base)
        local = bool(cfg.attention_pattern) and cfg.attention_pattern[i] == "L"
        layer_mask = mask
        if local:
            layer_mask = mask & ~torch.ones(T, T, dtype=torch.bool, device=idx.device).tril(-cfg.window)
        if attention == "sdpa":
            y = _sdpa(q, k, v, layer_mask if local else None, dropout_p=cfg.attn_dropout if train else 0.0)
        else:
            k, v = k.repeat_interleave(H // Hkv, dim=1), v.repeat_interleave(H // Hkv, dim=1)
            att = (q @ k.transpose(-1, -2)) / math.sqrt(D)
            att = drop_attn(att.masked_fill(~layer_mask, float("-inf")).softmax(-1))
            y = att @ v
        y = y.transpose(1, 2).reshape(B, T, H * D)
        x = x + drop(y @ p("attn.proj.weight").T + (p("attn.proj.bias") if cfg.bias else 0))
        h = _norm(cfg, x, p("norm2.weight"), p("norm2.bias"))
        if cfg.ffn_pattern and cfg.ffn_pattern[i] == "M":
            out, layer_aux = _moe(cfg, P, f"blocks.{i}.mlp.", h)
            x = x + out
            aux = aux + layer_aux
            continue
        h = h @ p("mlp.fc.weight").T + (p("mlp.fc.bias") if cfg.bias else 0)
        if cfg.mlp == "gelu":
            h = F.gelu(h, approximate=cfg.gelu_approximate)
        else:
            gate, up = h.chunk(2, dim=-1)
            beta = p("mlp.beta")
            h = (gate * torch.sigmoid(beta * gate) if beta is not None else F.silu(gate)) * up
        x = x + drop(h @ p("mlp.proj.weight").T + (p("mlp.proj.bias") if cfg.bias else 0))
    x = _norm(cfg, x, P["norm.weight"], P.get("norm.bias"))
    head = P["tok_emb.weight"] if cfg.tie_embeddings else P["lm_head.weight"]
    logits = x @ head.T
    return (logits, aux) if with_aux else logits
