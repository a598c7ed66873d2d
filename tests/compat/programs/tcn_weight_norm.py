"""A temporal convolutional network (TCN) in the style of locuslab/TCN: causal dilated Conv1d layers
wrapped in torch.nn.utils.weight_norm (weight_g / weight_v parameters, the weight recomputed by a
forward pre-hook), chomped padding, residual 1x1 convolutions, Adam; then weight_norm(dim=None) on a
Linear and remove_weight_norm."""

import torch
import torch.nn as nn
from torch.nn.utils import weight_norm, remove_weight_norm
import numpy as np
import warnings

warnings.simplefilter("ignore")
rng = np.random.default_rng(2)


class TemporalBlock(nn.Module):
    def __init__(self, n_in, n_out, k, dilation):
        super().__init__()
        self.conv1 = weight_norm(nn.Conv1d(n_in, n_out, k, padding=(k - 1) * dilation, dilation=dilation))
        self.conv2 = weight_norm(nn.Conv1d(n_out, n_out, k, padding=(k - 1) * dilation, dilation=dilation))
        self.down = nn.Conv1d(n_in, n_out, 1)
        self.pad = (k - 1) * dilation

    def forward(self, x):
        out = torch.relu(self.conv1(x)[:, :, : -self.pad])
        out = torch.relu(self.conv2(out)[:, :, : -self.pad])
        return torch.relu(out + self.down(x))


net = nn.Sequential(TemporalBlock(2, 4, 3, 1), TemporalBlock(4, 4, 3, 2))
with torch.no_grad():
    for p in net.parameters():
        p.copy_(torch.tensor(rng.normal(0, 0.5, size=tuple(p.shape)), dtype=torch.float32))
print([n for n, _ in net.named_parameters()][:4], list(net.state_dict().keys())[:4], net[0].conv1.weight_g.shape)
x = torch.tensor(rng.normal(size=(3, 2, 10)), dtype=torch.float32)
opt = torch.optim.Adam(net.parameters(), lr=0.01)
for step in range(4):
    loss = net(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(step, f"{loss.item():.6f}", net[0].conv1.weight_g.grad.flatten()[:2], net[1].conv2.weight_v.grad.abs().sum())
lin = weight_norm(nn.Linear(3, 2), dim=None)
with torch.no_grad():
    lin.weight_v.copy_(torch.tensor(rng.normal(size=(2, 3)), dtype=torch.float32))
    lin.weight_g.fill_(2.0)
    lin.bias.fill_(0.1)
print(lin.weight_g.shape, lin(torch.ones(1, 3)))
remove_weight_norm(lin)
print([n for n, _ in lin.named_parameters()], lin.weight, lin(torch.ones(1, 3)))
