"""An independent PyTorch implementation of gradcraft's decoder: the oracle of tests/test_models.py and
the eager-PyTorch side of the training benchmarks.

Written from the architecture description, not from gradcraft's code: it takes a
ModelConfig and a state dict of NumPy arrays (our parameter names) and returns logits.
"""

import math

import torch
import torch.nn.functional as F


def _norm(cfg, x, w, b):
    if cfg.norm == "layernorm":
        return F.layer_norm(x, (cfg.dim,), w, b, cfg.norm_eps)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + cfg.norm_eps) * w


def _rope(x, start=0, base=10000.0):
    T, D = x.shape[-2], x.shape[-1]
    inv = 1.0 / base ** (torch.arange(0, D, 2, dtype=torch.float64, device=x.device) / D)
    ang = torch.outer(torch.arange(start, start + T, dtype=torch.float64, device=x.device), inv)
    cos, sin = torch.cat([ang.cos(), ang.cos()], -1).to(x.dtype), torch.cat([ang.sin(), ang.sin()], -1).to(x.dtype)
    rotated = torch.cat([-x[..., D // 2:], x[..., :D // 2]], -1)
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
        y = y.index_add(0, rows, (F.silu(gate) * up) @ P[prefix + "down"][e].T * w[rows, slots, None])
    probs = logits.softmax(-1)
    fraction = F.one_hot(top_i, E).sum(1).float().mean(0)
    balance = E * (fraction * probs.mean(0)).sum()
    z = (logits.logsumexp(-1) ** 2).mean()
    return y.reshape(B, T, C), cfg.moe_balance * balance + cfg.moe_zloss * z


def forward(cfg, params: dict, idx: torch.Tensor, with_aux: bool = False):
    """Logits (B, T, V); with_aux, also the sum of the mixture-of-experts auxiliary losses."""
    P = params
    B, T = idx.shape
    H, Hkv, D = cfg.n_heads, cfg.n_kv_heads, cfg.dim // cfg.n_heads
    x = P["tok_emb.weight"][idx]
    if cfg.positions == "learned":
        x = x + P["pos_emb.weight"][:T]
    mask = torch.ones(T, T, dtype=torch.bool, device=idx.device).tril()
    aux = 0.0
    for i in range(cfg.n_layers):
        p = lambda n: P.get(f"blocks.{i}.{n}")  # noqa: E731
        h = _norm(cfg, x, p("norm1.weight"), p("norm1.bias"))
        qkv = h @ p("attn.qkv.weight").T + (p("attn.qkv.bias") if cfg.bias else 0)
        q, k, v = qkv.split([H * D, Hkv * D, Hkv * D], dim=-1)
        q = q.view(B, T, H, D).transpose(1, 2)
        k = k.view(B, T, Hkv, D).transpose(1, 2).repeat_interleave(H // Hkv, dim=1)
        v = v.view(B, T, Hkv, D).transpose(1, 2).repeat_interleave(H // Hkv, dim=1)
        if cfg.positions == "rope":
            q, k = _rope(q, base=cfg.rope_base), _rope(k, base=cfg.rope_base)
        layer_mask = mask
        if cfg.attention_pattern and cfg.attention_pattern[i] == "L":
            layer_mask = mask & ~torch.ones(T, T, dtype=torch.bool, device=idx.device).tril(-cfg.window)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(D)
        att = att.masked_fill(~layer_mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, H * D)
        x = x + y @ p("attn.proj.weight").T + (p("attn.proj.bias") if cfg.bias else 0)
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
        x = x + h @ p("mlp.proj.weight").T + (p("mlp.proj.bias") if cfg.bias else 0)
    x = _norm(cfg, x, P["norm.weight"], P.get("norm.bias"))
    head = P["tok_emb.weight"] if cfg.tie_embeddings else P["lm_head.weight"]
    logits = x @ head.T
    return (logits, aux) if with_aux else logits
