"""Boolean-mask selection and assignment, any/all, nonzero counts."""
import numpy as np
import torch

rng = np.random.default_rng(16)
x = torch.tensor(rng.normal(size=(4, 5)), dtype=torch.float32)
positive = x > 0
print(positive.sum().item(), positive.any().item(), positive.all().item())
print(x[positive].tolist())
print(x[x.abs() > 1.0].numel())
rows = torch.tensor([True, False, True, False])
print(x[rows].shape, x[rows][:, 0].tolist())
y = x.clone()
y[y < 0] = 0.0
print(torch.equal(y, x.clamp(min=0)), y.sum().item())
y[rows] = torch.arange(10, dtype=torch.float32).reshape(2, 5)
print(y.tolist())
print(torch.isnan(x / (x > 0)).sum().item(), torch.isinf(1 / (x > 100).float()).all().item())
print(x.masked_select(positive).numel() if hasattr(x, "masked_select") else -1)
