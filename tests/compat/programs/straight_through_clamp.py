"""A straight-through estimator: a clamp whose backward lets the gradient through unchanged, with a
mask output that is not differentiable, `needs_input_grad`, `once_differentiable` and a number
argument; used to train a tiny quantized-activation regressor."""
import numpy as np
import torch
import torch.nn as nn
from torch.autograd.function import once_differentiable


class ClampSTE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, low, high):
        inside = (x >= low) & (x <= high)
        ctx.mark_non_differentiable(inside)
        ctx.low, ctx.high = low, high
        return x.clamp(low, high), inside

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out, grad_inside):
        grad_x = grad_out if ctx.needs_input_grad[0] else None
        return grad_x, None, None


class RoundSTE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return torch.round(x * 4) / 4

    @staticmethod
    def backward(ctx, grad):
        return grad


rng = np.random.default_rng(5)
X = torch.tensor(rng.normal(size=(32, 3)), dtype=torch.float32)
Y = torch.tensor(rng.normal(size=(32, 1)), dtype=torch.float32)
layer1, layer2 = nn.Linear(3, 8), nn.Linear(8, 1)
with torch.no_grad():
    for p in list(layer1.parameters()) + list(layer2.parameters()):
        p.copy_(torch.tensor(rng.normal(0, 0.5, size=tuple(p.shape)), dtype=torch.float32))
opt = torch.optim.SGD(list(layer1.parameters()) + list(layer2.parameters()), lr=0.05)

for step in range(20):
    opt.zero_grad()
    h, inside = ClampSTE.apply(layer1(X), -1.0, 1.0)
    out = layer2(RoundSTE.apply(h))
    loss = ((out - Y) ** 2).mean()
    flags = (inside.requires_grad, h.requires_grad, out.requires_grad)
    loss.backward()
    opt.step()
    if step % 5 == 0:
        print(step, f"{loss.item():.5f}", int(inside.sum()), flags)

x = torch.tensor([-2.0, -0.5, 0.25, 3.0], requires_grad=True)
y, mask = ClampSTE.apply(x, -1.0, 1.0)
(y * torch.tensor([1.0, 2.0, 3.0, 4.0])).sum().backward()
print(y, mask, x.grad)
