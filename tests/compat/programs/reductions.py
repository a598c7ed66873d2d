"""Reductions with dim, keepdim and NumPy's axis keyword."""
import numpy as np
import torch

rng = np.random.default_rng(19)
x = torch.tensor(rng.normal(size=(3, 4)), dtype=torch.float64)
print(x.sum().item(), x.sum(axis=1).tolist(), x.sum(dim=0, keepdim=True).shape)
print(x.mean(1).tolist(), torch.mean(x, dim=(0, 1)).item())
print(x.std().item(), x.var(dim=1, unbiased=False).tolist(), x.std(0).tolist())
print(x.logsumexp(dim=1).tolist(), torch.logsumexp(x, 0).tolist())
print(x.cumsum(dim=1)[:, -1].tolist(), torch.cumsum(x, 0)[-1].tolist())
print(x.abs().prod(dim=1).tolist(), x.amax(dim=0).tolist(), x.amin(1).tolist())
print(x.argmax().item(), x.argmin(dim=1).tolist(), torch.argmax(x, dim=0, keepdim=True).tolist())
values, indices = x.max(dim=1)
print(values.tolist(), indices.tolist(), torch.max(x).item(), torch.min(x, dim=0)[1].tolist())
print((x > 0).sum(dim=1).tolist(), (x > 0).any(dim=0).tolist(), (x > -3).all().item())
