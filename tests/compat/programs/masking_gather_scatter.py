"""Masking, gather and index writes as in sequence-model code."""
import numpy as np
import torch

rng = np.random.default_rng(7)
scores = torch.tensor(rng.normal(size=(2, 5)), dtype=torch.float32)
lengths = torch.tensor([3, 5])
positions = torch.arange(5).unsqueeze(0)
mask = positions >= lengths.unsqueeze(1)
print(mask.tolist())
masked = scores.masked_fill(mask, float("-inf"))
probs = torch.softmax(masked, dim=-1)
print(probs.sum(dim=-1).tolist())
print(probs[0].tolist())

targets = torch.tensor([[1], [4]])
picked = torch.gather(scores, 1, targets)
print(picked.squeeze(1).tolist())

counts = torch.zeros(6)
tokens = torch.tensor([1, 3, 3, 5, 0])
counts[tokens] = 1.0
print(counts.tolist())
table = torch.zeros(3, 4)
table[torch.tensor([0, 2]), torch.tensor([1, 3])] = torch.tensor([7.0, 8.0])
table[1, :] = torch.arange(4).float()
print(table.tolist())
print(torch.where(scores > 0, scores, torch.zeros_like(scores)).sum().item())
print(scores[mask].tolist())
scores[mask] = 0.0
print(scores.sum().item())
