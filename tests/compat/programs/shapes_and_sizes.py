"""Shapes as PyTorch prints and uses them: torch.Size, size(dim), numel, and shapes passed around."""
import torch

x = torch.arange(24).reshape(2, 3, 4)
print(x.shape)
print(x.size(), x.size(1), x.size(-1), x.dim(), x.ndim)
print(f"Shape of tensor: {x.shape}")
print(f"Datatype of tensor: {x.dtype}")
print(x.shape[0], x.shape[-1], len(x.shape), x.numel(), x.shape.numel())
print(list(x.shape), tuple(x.shape), x.shape == (2, 3, 4), x.shape == torch.Size([2, 3, 4]))
print(torch.Size([5, 6]), torch.Size([]), torch.zeros(torch.Size([2, 2])).shape)
batch, seq, dim = x.shape
print(batch * seq * dim)
y = x.view(x.size(0), -1)
print(y.shape, y.view(*x.shape).shape, x.flatten(1).shape)
print(torch.ones(x.shape[1:]).shape)
print(x.new_zeros(x.shape).shape, torch.zeros_like(x).shape)
print(x.sum(dim=1).shape, x.sum(dim=(0, 2), keepdim=True).shape)
print(torch.Size([2]) + (3,))
shape = torch.zeros(3, 1).expand(3, 5).shape
print(shape, shape.numel())
