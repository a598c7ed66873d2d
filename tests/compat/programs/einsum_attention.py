"""Single-head causal attention written with einsum, forward and gradients."""
import math

import numpy as np
import torch

rng = np.random.default_rng(8)
B, T, D = 2, 4, 8
x = torch.tensor(rng.normal(size=(B, T, D)), requires_grad=True)
Wq, Wk, Wv = (torch.tensor(rng.normal(0, 0.3, size=(D, D)), requires_grad=True) for _ in range(3))

q = torch.einsum("btd,de->bte", x, Wq)
k = torch.einsum("btd,de->bte", x, Wk)
v = torch.einsum("btd,de->bte", x, Wv)
scores = torch.einsum("bqd,bkd->bqk", q, k) / math.sqrt(D)
causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
scores = scores.masked_fill(~causal, float("-inf"))
weights = scores.softmax(dim=-1)
out = torch.einsum("bqk,bkd->bqd", weights, v)
loss = out.pow(2).mean()
loss.backward()
print(loss.item())
print(weights[0, 2].tolist())
print(x.grad.abs().sum().item(), Wq.grad.norm().item(), Wv.grad[0].tolist())
print(torch.einsum("ij->", torch.eye(3)).item(), torch.einsum("i,i->", x[0, 0], x[0, 1]).item())
