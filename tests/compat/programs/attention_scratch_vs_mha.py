"""Scaled dot-product attention written from scratch with einsum (multi-head split by view and
transpose, a causal mask with masked_fill(-inf), softmax), checked against nn.MultiheadAttention
given the same in/out projection weights, and against F.scaled_dot_product_attention."""

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

rng = np.random.default_rng(15)
B, T, E, H = 2, 5, 8, 2
x = torch.tensor(rng.normal(size=(B, T, E)), dtype=torch.float32)
w_in = torch.tensor(rng.normal(0, 0.3, size=(3 * E, E)), dtype=torch.float32)
b_in = torch.tensor(rng.normal(0, 0.1, size=3 * E), dtype=torch.float32)
w_out = torch.tensor(rng.normal(0, 0.3, size=(E, E)), dtype=torch.float32)
b_out = torch.zeros(E)


def attention(x, causal):
    q, k, v = F.linear(x, w_in, b_in).chunk(3, dim=-1)
    q, k, v = (t.view(B, T, H, E // H).transpose(1, 2) for t in (q, k, v))
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(E // H)
    if causal:
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        scores = scores.masked_fill(mask, float("-inf"))
    weights = scores.softmax(dim=-1)
    out = torch.einsum("bhqk,bhkd->bhqd", weights, v).transpose(1, 2).reshape(B, T, E)
    return F.linear(out, w_out, b_out), weights.mean(dim=1)


mha = nn.MultiheadAttention(E, H, batch_first=True)
with torch.no_grad():
    mha.in_proj_weight.copy_(w_in)
    mha.in_proj_bias.copy_(b_in)
    mha.out_proj.weight.copy_(w_out)
    mha.out_proj.bias.copy_(b_out)

for causal in (False, True):
    mine, my_weights = attention(x, causal)
    mask = nn.Transformer.generate_square_subsequent_mask(T) if causal else None
    theirs, their_weights = mha(x, x, x, attn_mask=mask, need_weights=True)
    print(causal, torch.allclose(mine, theirs, atol=1e-5), torch.allclose(my_weights, their_weights, atol=1e-6))
    print(mine[0, -1])
print(mask)
q, k, v = (t.view(B, T, H, E // H).transpose(1, 2) for t in F.linear(x, w_in, b_in).chunk(3, dim=-1))
sdpa = F.scaled_dot_product_attention(q, k, v, is_causal=True)
print(sdpa.shape, torch.allclose(F.linear(sdpa.transpose(1, 2).reshape(B, T, E), w_out, b_out), mine, atol=1e-5))
xr = x.clone().requires_grad_(True)
out, _ = attention(xr, True)
out.pow(2).sum().backward()
print(xr.grad[1, 0])
