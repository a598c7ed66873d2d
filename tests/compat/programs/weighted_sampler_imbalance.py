"""Class balancing for an imbalanced data set: per-sample weights 1 / class_count for a
WeightedRandomSampler (its draws differ between libraries, so only their properties are printed),
and the deterministic counterpart, per-sample loss weights with reduction="none", used to train."""

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset, WeightedRandomSampler

rng = np.random.default_rng(13)
labels = np.array([0] * 90 + [1] * 10)
X = rng.normal(size=(100, 2)) + labels[:, None] * 1.5
targets = torch.tensor(labels)
dataset = TensorDataset(torch.tensor(X, dtype=torch.float32), targets)

class_count = torch.stack([(targets == c).sum() for c in range(2)])
class_weights = 1.0 / class_count.float()
sample_weights = class_weights[targets]
print(class_count, class_weights, sample_weights.sum())
sampler = WeightedRandomSampler(sample_weights, num_samples=len(sample_weights), replacement=True)
loader = DataLoader(dataset, batch_size=20, sampler=sampler)
drawn = torch.cat([yb for _, yb in loader])
print(len(sampler), len(loader), drawn.shape, 0.3 < drawn.float().mean().item() < 0.7)

model = nn.Linear(2, 2)
with torch.no_grad():
    model.weight.copy_(torch.tensor(rng.normal(0, 0.3, (2, 2)), dtype=torch.float32))
    model.bias.zero_()
criterion = nn.CrossEntropyLoss(reduction="none")
opt = torch.optim.SGD(model.parameters(), lr=0.5)
xs, ys = dataset.tensors
for epoch in range(30):
    per_sample = criterion(model(xs), ys)
    loss = (per_sample * sample_weights).sum() / sample_weights.sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if epoch % 10 == 0:
        print(f"epoch {epoch} balanced loss {loss.item():.4f}")
with torch.no_grad():
    pred = model(xs).argmax(1)
for c in range(2):
    mask = ys == c
    print(f"class {c} recall {(pred[mask] == c).float().mean().item():.3f}")
