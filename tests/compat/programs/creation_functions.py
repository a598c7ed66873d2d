"""Creation functions and dtypes."""
import numpy as np
import torch

print(torch.linspace(0, 1, 5).tolist(), torch.linspace(-2, 2, 4).tolist())
print(torch.arange(5).tolist(), torch.arange(1, 10, 3).tolist(), torch.arange(0, 1, 0.25).tolist())
print(torch.zeros(2, 3).shape, torch.ones((2,)).tolist(), torch.full((2, 2), 7).tolist())
print(torch.eye(3).tolist(), torch.eye(2, 3).tolist())
x = torch.arange(1, 10).reshape(3, 3).float()
print(torch.tril(x).tolist(), torch.triu(x, diagonal=1).tolist(), x.tril(-1).sum().item())
n = np.array([[1.5, 2.5], [3.5, 4.5]])
t = torch.from_numpy(n)
print(t.dtype == torch.float64, t.sum().item(), torch.as_tensor([1, 2, 3]).tolist())
print(torch.zeros_like(x).sum().item(), torch.ones_like(x).sum().item(), torch.full_like(x, 2).sum().item())
print(torch.tensor([1, 2]).dtype == torch.int64, torch.tensor([1.0]).dtype == torch.float32)
print(torch.tensor([True, False]).dtype == torch.bool, torch.tensor(3.5).item(), torch.tensor([[1, 2]]).shape)
print(x.new_zeros(2).tolist(), x.new_ones((1, 2)).tolist(), x.new_full((2,), 3.0).tolist())
print(torch.empty(2, 2).shape, torch.zeros(3, dtype=torch.long).tolist(), torch.ones(2).double().dtype == torch.float64)
