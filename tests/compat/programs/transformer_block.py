"""A pre-norm transformer block: causal self-attention (explicit and scaled_dot_product_attention)
and an MLP, with residual connections; forward and a training step."""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, dim=8, heads=2):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def attention(self, x, fused):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        if fused:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
            mask = torch.tril(torch.ones(T, T)).view(1, 1, T, T)
            att = att.masked_fill(mask == 0, float("-inf"))
            y = F.softmax(att, dim=-1) @ v
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))

    def forward(self, x, fused=False):
        x = x + self.attention(self.ln1(x), fused)
        return x + self.mlp(self.ln2(x))


rng = np.random.default_rng(27)
block = Block()
with torch.no_grad():
    for p in block.parameters():
        p.copy_(torch.tensor(rng.normal(0, 0.3, size=tuple(p.shape)), dtype=torch.float32))
x = torch.tensor(rng.normal(size=(2, 5, 8)), dtype=torch.float32)
a, b = block(x), block(x, fused=True)
print(a.sum().item(), torch.allclose(a, b, atol=1e-5))
opt = torch.optim.Adam(block.parameters(), lr=0.01)
for step in range(3):
    loss = block(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(step, loss.item())
