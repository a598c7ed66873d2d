"""A WaveNet/TCN-style forecaster: causal Conv1d layers with growing dilation, left padding with F.pad
so no output sees the future (checked by perturbing a late input and reading the gradient), residual
connections, a 1x1 output conv, trained to predict the next value of a noisy sine series."""

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalConv1d(nn.Conv1d):
    def __init__(self, cin, cout, kernel_size, dilation=1):
        super().__init__(cin, cout, kernel_size, dilation=dilation)
        self.left = (kernel_size - 1) * dilation

    def forward(self, x):
        return super().forward(F.pad(x, (self.left, 0)))


class TCN(nn.Module):
    def __init__(self, channels=6, levels=3):
        super().__init__()
        self.inp = nn.Conv1d(1, channels, 1)
        self.layers = nn.ModuleList([CausalConv1d(channels, channels, 2, dilation=2**i) for i in range(levels)])
        self.out = nn.Conv1d(channels, 1, 1)

    def forward(self, x):
        h = self.inp(x)
        for layer in self.layers:
            h = h + torch.tanh(layer(h))
        return self.out(h)


rng = np.random.default_rng(27)
t = np.arange(0, 64) * 0.3
series = np.sin(t)[None, None, :] + rng.normal(0, 0.05, size=(4, 1, 64)) * np.ones((4, 1, 1))
series = series + rng.normal(0, 0.05, size=(4, 1, 64))
series = torch.tensor(series, dtype=torch.float32)
inputs, targets = series[:, :, :-1], series[:, :, 1:]

model = TCN()
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.tensor(rng.normal(0, 0.3, size=tuple(p.shape)), dtype=torch.float32))
print([layer.dilation for layer in model.layers], [layer.left for layer in model.layers])
print("receptive field", 1 + sum(layer.left for layer in model.layers))
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
for epoch in range(25):
    pred = model(inputs)
    loss = F.mse_loss(pred, targets)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if epoch % 8 == 0:
        print(f"epoch {epoch} mse {loss.item():.5f}")
print(pred.shape)

probe = inputs[:1].clone().requires_grad_(True)
model(probe)[0, 0, 30].backward()
influence = probe.grad[0, 0]
print((influence[31:] == 0).all().item(), (influence[23:31] != 0).sum().item(), influence[30])
