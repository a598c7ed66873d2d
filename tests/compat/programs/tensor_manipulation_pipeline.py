"""Data wrangling with tensor ops as preprocessing code writes it: clamping outliers with
torch.where, filling missing values (NaN) with column means via masked_fill and nanmean-free
arithmetic, label lookup with gather, one-hot by comparison, per-row top-k selection, bucketing
with searchsorted-free comparisons, and a batch assembled with cat/stack/chunk."""

import numpy as np
import torch
import torch.nn.functional as F

rng = np.random.default_rng(37)
raw = rng.normal(size=(8, 4))
raw[1, 2] = np.nan
raw[5, 0] = np.nan
raw[3, 1] = 9.0
x = torch.tensor(raw, dtype=torch.float32)

missing = torch.isnan(x)
print(missing.sum().item(), missing.any(dim=0))
filled_zero = x.masked_fill(missing, 0.0)
col_mean = filled_zero.sum(0) / (~missing).sum(0)
x = torch.where(missing, col_mean.expand_as(x), x)
print(col_mean, torch.isnan(x).any().item())
mean, std = x.mean(0, keepdim=True), x.std(0, keepdim=True)
z = (x - mean) / std
clipped = torch.where(z.abs() > 2, torch.sign(z) * 2, z)
print(clipped[3], (z.abs() > 2).sum().item())

labels = torch.tensor(rng.integers(0, 3, size=8))
one_hot = (labels.unsqueeze(1) == torch.arange(3)).float()
print(torch.equal(one_hot, F.one_hot(labels, 3).float()), one_hot.sum(0))
logits = torch.tensor(rng.normal(size=(8, 3)), dtype=torch.float32)
log_probs = logits.log_softmax(-1)
picked = log_probs.gather(1, labels.unsqueeze(1)).squeeze(1)
print(picked, torch.allclose(-picked.mean(), F.cross_entropy(logits, labels)))

vals, idx = clipped.topk(2, dim=1)
mask = torch.zeros_like(clipped, dtype=torch.bool)
mask[torch.arange(8).unsqueeze(1), idx] = True
sparse = clipped.masked_fill(~mask, 0.0)
print(idx[:3], (sparse != 0).sum(1))
edges = torch.tensor([-1.0, 0.0, 1.0])
buckets = (clipped[:, :1] > edges).sum(dim=1)
print(buckets)

parts = torch.chunk(clipped, 2, dim=1)
left, right = parts
stacked = torch.stack([left, right], dim=0)
print(len(parts), stacked.shape, torch.equal(torch.cat(parts, dim=1), clipped))
batch = torch.cat([clipped, one_hot, picked.unsqueeze(1)], dim=1)
print(batch.shape, batch[0])
halves = batch.split([5, 3])
print([h.shape[0] for h in halves], torch.stack([h.mean(0) for h in halves]).shape)
