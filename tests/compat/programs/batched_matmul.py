"""Batched products: bmm, broadcasting matmul, transposes."""
import numpy as np
import torch

rng = np.random.default_rng(18)
a = torch.tensor(rng.normal(size=(3, 2, 4)), requires_grad=True)
b = torch.tensor(rng.normal(size=(3, 4, 5)), requires_grad=True)
c = torch.bmm(a, b)
print(c.shape, c.sum().item())
d = a @ b[0]
print(d.shape, d.mean().item())
e = torch.matmul(a.transpose(1, 2), a)
print(e.shape, e[0, 0, 0].item())
(c.sum() + d.pow(2).sum() + e.sum()).backward()
print(a.grad.sum().item(), b.grad.norm().item())
print(torch.mm(a[0], b[0]).shape, torch.dot(a[0, 0], a[0, 1]).item(), torch.outer(a[0, 0], a[1, 0]).shape)
