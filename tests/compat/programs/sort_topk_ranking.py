"""Ranking: sort, argsort, topk, and a rank-based metric."""
import numpy as np
import torch

rng = np.random.default_rng(14)
scores = torch.tensor(rng.normal(size=(3, 6)), dtype=torch.float32)
values, order = scores.sort(dim=1, descending=True)
print(values[:, 0].tolist(), order.tolist())
print(torch.argsort(scores, dim=0).tolist())
top = scores.topk(2, dim=1)
print(top.values.tolist(), top.indices.tolist())
relevant = torch.tensor([1, 4, 0])
ranks = (order == relevant.unsqueeze(1)).float().argmax(dim=1)
print("ranks", ranks.tolist(), "mrr", (1.0 / (ranks.float() + 1)).mean().item())
sorted_all, _ = torch.sort(scores.flatten())
print(sorted_all[:4].tolist(), torch.max(scores).item(), torch.min(scores).item())
print(scores.max(dim=0).values.tolist(), scores.min(dim=1).indices.tolist())
