"""Normalization layers in small models: nn.LayerNorm over the last dim and over the last two
(normalized_shape as a tuple, elementwise_affine=False), an RMSNorm module written by hand, F.layer_norm,
a GroupNorm conv net including the InstanceNorm-like (groups = channels) and LayerNorm-like (one
group) cases, each checked against its formula and trained briefly."""

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

rng = np.random.default_rng(71)
x = torch.tensor(rng.normal(2.0, 3.0, size=(4, 3, 5)), dtype=torch.float32)
ln = nn.LayerNorm(5)
manual = (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + 1e-5)
print(torch.allclose(ln(x), manual, atol=1e-5), ln.weight.shape, ln.eps)
ln2 = nn.LayerNorm((3, 5), elementwise_affine=False)
print(len(list(ln2.parameters())), ln2(x).mean(dim=(1, 2)).abs().max().item() < 1e-5, ln2(x).std(dim=(1, 2)).detach())
print(torch.allclose(F.layer_norm(x, (3, 5)), ln2(x), atol=1e-6))
print(F.layer_norm(x, (5,), weight=torch.full((5,), 2.0), bias=torch.ones(5))[0, 0])


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Block(nn.Module):
    def __init__(self, dim, norm):
        super().__init__()
        self.norm = norm
        self.ff = nn.Sequential(nn.Linear(dim, 2 * dim), nn.SiLU(), nn.Linear(2 * dim, dim))

    def forward(self, x):
        return x + self.ff(self.norm(x))


inputs = torch.tensor(rng.normal(size=(16, 6)), dtype=torch.float32)
targets = torch.tensor(rng.normal(size=(16, 6)), dtype=torch.float32)
init = [rng.normal(0, 0.3, size=s) for s in [(12, 6), (12,), (6, 12), (6,)]]
for name, norm in (("layernorm", nn.LayerNorm(6)), ("rmsnorm", RMSNorm(6))):
    model = Block(6, norm)
    with torch.no_grad():
        for p, w in zip(model.ff.parameters(), init):
            p.copy_(torch.tensor(w, dtype=torch.float32))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(15):
        loss = F.mse_loss(model(inputs), targets)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"{name}: loss {loss.item():.5f} norm weight {model.norm.weight.data[:3]}")

img = torch.tensor(rng.normal(1.0, 2.0, size=(2, 4, 3, 3)), dtype=torch.float32)
for groups in (1, 2, 4):
    gn = nn.GroupNorm(groups, 4)
    out = gn(img)
    g = img.view(2, groups, -1)
    ref = ((g - g.mean(-1, keepdim=True)) / torch.sqrt(g.var(-1, unbiased=False, keepdim=True) + 1e-5)).view_as(img)
    print(groups, torch.allclose(out, ref, atol=1e-5), out[0, 0, 0].detach())
