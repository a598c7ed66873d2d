"""An Inception-style multi-branch model and a tensor pipeline around it: the input split into
feature groups with torch.split and chunk, one branch per group, outputs concatenated with
torch.cat, an ensemble of heads stacked with torch.stack and averaged, unbind over the ensemble
axis, and torch.cat of per-batch predictions collected in a list."""

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class MultiBranch(nn.Module):
    def __init__(self, groups=(2, 3, 1), width=4, heads=3):
        super().__init__()
        self.groups = list(groups)
        self.branches = nn.ModuleList([nn.Sequential(nn.Linear(g, width), nn.GELU()) for g in groups])
        self.heads = nn.ModuleList([nn.Linear(width * len(groups), 2) for _ in range(heads)])

    def forward(self, x):
        parts = torch.split(x, self.groups, dim=1)
        features = torch.cat([branch(part) for branch, part in zip(self.branches, parts)], dim=1)
        a, b = features.chunk(2, dim=1)
        features = torch.cat([a, b * 0.5], dim=-1)
        return torch.stack([head(features) for head in self.heads], dim=0)


rng = np.random.default_rng(59)
X = torch.tensor(rng.normal(size=(30, 6)), dtype=torch.float32)
y = ((X[:, 0] + X[:, 3] * X[:, 4]) > 0).long()
model = MultiBranch()
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.tensor(rng.normal(0, 0.5, size=tuple(p.shape)), dtype=torch.float32))
out = model(X)
print(out.shape, [p.shape[1] for p in torch.split(X, [2, 3, 1], dim=1)])
opt = torch.optim.Adam(model.parameters(), lr=0.03)
for step in range(20):
    logits = model(X)
    loss = sum(F.cross_entropy(h, y) for h in logits.unbind(0)) / logits.size(0)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 5 == 0:
        print(f"step {step} ensemble loss {loss.item():.4f}")

preds = []
with torch.no_grad():
    for batch in X.chunk(4):
        preds.append(model(batch).softmax(-1).mean(0))
probs = torch.cat(preds)
print(len(preds), [p.shape[0] for p in preds], probs.shape)
print(f"ensemble accuracy {(probs.argmax(1) == y).float().mean().item():.3f}")
per_head = torch.stack([(h.argmax(1) == y).float().mean() for h in model(X).detach().unbind(0)])
print(per_head, torch.stack([probs[:, 1], y.float()], dim=1)[:4])
