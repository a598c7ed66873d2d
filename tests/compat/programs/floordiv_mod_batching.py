"""Integer arithmetic for batching and positions: //, %, div(rounding_mode)."""
import torch

idx = torch.arange(-7, 8)
print((idx // 3).tolist())
print((idx % 3).tolist())
print(torch.div(idx, 3, rounding_mode="trunc").tolist(), torch.div(idx, 3, rounding_mode="floor").tolist())
flat = torch.arange(12)
rows, cols = flat // 4, flat % 4
print(rows.tolist(), cols.tolist())
x = torch.tensor([5.5, -5.5, 7.25])
print((x // 2).tolist(), (x % 2).tolist(), torch.fmod(x, 2).tolist(), torch.remainder(x, -2).tolist())
print(torch.floor(x).tolist(), torch.ceil(x).tolist(), torch.round(torch.tensor([0.5, 1.5, 2.5, -0.5])).tolist())
print((7 // torch.tensor([2, 3])).tolist(), (10 % torch.tensor([3, 4])).tolist())
