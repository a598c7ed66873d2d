"""Autograd against central finite differences in float64."""
import numpy as np
import torch

rng = np.random.default_rng(26)
x = torch.tensor(rng.normal(size=5), requires_grad=True)
W = torch.tensor(rng.normal(size=(3, 5)))


def f(v):
    h = torch.tanh(W @ v)
    return (h.softmax(dim=0) * torch.arange(3, dtype=torch.float64)).sum() + v.norm() ** 2


f(x).backward()
numeric = []
eps = 1e-6
with torch.no_grad():
    for i in range(5):
        e = torch.zeros(5, dtype=torch.float64)
        e[i] = eps
        numeric.append(((f(x + e) - f(x - e)) / (2 * eps)).item())
print([round(g, 6) for g in x.grad.tolist()])
print([round(n, 6) for n in numeric])
print(max(abs(a - b) for a, b in zip(x.grad.tolist(), numeric)) < 1e-6)
