"""The activation modules on a grid of inputs, with their gradients."""
import torch
import torch.nn as nn

x = torch.linspace(-3, 3, 13, dtype=torch.float64, requires_grad=True)
for act in (nn.ReLU(), nn.LeakyReLU(0.1), nn.ELU(alpha=0.5), nn.GELU(), nn.GELU(approximate="tanh"), nn.SiLU(),
            nn.Sigmoid(), nn.Tanh(), nn.Softplus(beta=2.0), nn.Identity()):
    x.grad = None
    y = act(x)
    y.sum().backward()
    print(act, round(y.sum().item(), 8), round(x.grad.sum().item(), 8))
probs = nn.Softmax(dim=0)(x)
print(probs.sum().item(), nn.LogSoftmax(dim=0)(x).exp().sum().item())
