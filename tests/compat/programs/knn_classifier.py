"""k-nearest neighbours with broadcasting distances, topk, one_hot votes."""
import numpy as np
import torch
import torch.nn.functional as F

rng = np.random.default_rng(30)
train_x = torch.tensor(rng.normal(size=(20, 2)), dtype=torch.float32)
train_y = (train_x[:, 0] > 0).long() + (train_x[:, 1] > 0.5).long()
test_x = torch.tensor([[1.0, 1.0], [-1.0, -1.0], [0.5, 0.0], [-0.2, 2.0]])
dist = ((test_x.unsqueeze(1) - train_x.unsqueeze(0)) ** 2).sum(-1)
nearest = dist.topk(3, dim=1, largest=False)
print(nearest.indices.tolist())
votes = F.one_hot(train_y[nearest.indices], num_classes=3).sum(dim=1)
print(votes.tolist(), votes.argmax(dim=1).tolist())
print(torch.sqrt(nearest.values).tolist())
