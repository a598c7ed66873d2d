"""Joining and splitting: cat, stack, split, chunk, unbind, narrow, index_select."""
import torch

a = torch.arange(6).reshape(2, 3)
b = torch.arange(6, 12).reshape(2, 3)
print(torch.cat([a, b]).tolist(), torch.cat((a, b), dim=1).tolist())
print(torch.stack([a, b]).shape, torch.stack([a, b], dim=2)[1].tolist())
print([p.tolist() for p in torch.arange(7).split(3)], [p.shape for p in torch.arange(10).reshape(5, 2).split([1, 4])])
print([c.tolist() for c in torch.arange(6).chunk(4)])
print([u.tolist() for u in a.unbind(1)], [u.tolist() for u in torch.unbind(b)])
print(a.narrow(1, 1, 2).tolist(), b.index_select(1, torch.tensor([2, 0])).tolist())
print(a.flatten().tolist(), a.view(3, 2).tolist(), a.reshape(-1, 1).shape, a.unsqueeze(0).shape)
print(a.T.tolist(), a.t().contiguous().view(-1).tolist(), a.permute(1, 0).shape, a.flip(0).tolist())
print(a.repeat(2, 1).tolist(), a.expand(2, 2, 3).shape, a[None, :, None].shape, a.squeeze().shape)
