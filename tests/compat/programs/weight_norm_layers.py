"""Weight normalisation as programs use it: the older `torch.nn.utils.weight_norm` (weight_g,
weight_v; dim=0 and dim=None), the newer `torch.nn.utils.parametrizations.weight_norm`
(parametrizations.weight.original0/1, `parametrize.is_parametrized`), a WaveNet-style conv stack
wrapped in it, trained a few Adam steps, and `remove_weight_norm` / `parametrize.remove_parametrizations`
folding the weight back. Weights from NumPy."""

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import parametrize, remove_weight_norm, weight_norm
from torch.nn.utils.parametrizations import weight_norm as param_weight_norm

rng = np.random.default_rng(2)


def fill(module):
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.tensor(rng.normal(0, 0.5, size=tuple(p.shape)), dtype=torch.float32))


lin = nn.Linear(4, 3)
fill(lin)
w = lin.weight.detach().clone()
lin = weight_norm(lin, name="weight")
print(sorted(n for n, _ in lin.named_parameters()), lin.weight_g.shape, lin.weight_v.shape)
print(torch.allclose(lin.weight_g.squeeze(1), w.norm(dim=1)), torch.allclose(lin.weight, w))

x = torch.tensor(rng.normal(size=(5, 4)), dtype=torch.float32)
loss = lin(x).pow(2).mean()
loss.backward()
print(lin.weight_g.grad.view(-1), lin.weight_v.grad[0])

conv = weight_norm(nn.Conv1d(2, 4, 3), dim=None)
print(conv.weight_g.shape, conv.weight_g.dim())

pl = nn.Linear(4, 3)
fill(pl)
w = pl.weight.detach().clone()
pl = param_weight_norm(pl)
print(parametrize.is_parametrized(pl), parametrize.is_parametrized(pl, "bias"))
print(sorted(n for n, _ in pl.named_parameters()))
print(pl.parametrizations.weight.original0.shape, torch.allclose(pl.weight, w))
print(list(pl.state_dict().keys()))


class Block(nn.Module):
    def __init__(self, channels, dilation):
        super().__init__()
        self.conv = param_weight_norm(nn.Conv1d(channels, channels, 3, padding=dilation, dilation=dilation))
        self.out = weight_norm(nn.Conv1d(channels, channels, 1))

    def forward(self, x):
        return x + self.out(torch.tanh(self.conv(x)))


net = nn.Sequential(Block(3, 1), Block(3, 2))
fill(net)
opt = torch.optim.Adam(net.parameters(), lr=0.01)
signal = torch.tensor(rng.normal(size=(2, 3, 10)), dtype=torch.float32)
target = torch.tensor(rng.normal(size=(2, 3, 10)), dtype=torch.float32)
for step in range(4):
    opt.zero_grad()
    loss = F.mse_loss(net(signal), target)
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item():.5f}")

before = net(signal).detach()
remove_weight_norm(net[0].out)
parametrize.remove_parametrizations(net[0].conv, "weight")
print(sorted(n for n, _ in net[0].named_parameters()), torch.allclose(net(signal), before, atol=1e-6))
try:
    remove_weight_norm(net[0].out)
except ValueError as e:
    print("ValueError:", e)
