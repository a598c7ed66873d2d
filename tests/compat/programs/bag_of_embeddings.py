"""Averaged word embeddings feeding two task heads kept in a ModuleDict."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

rng = np.random.default_rng(22)
tokens = torch.tensor(rng.integers(0, 20, size=(12, 5)))
topic = torch.tensor(rng.integers(0, 3, size=12))
score = torch.tensor(rng.normal(size=(12, 1)), dtype=torch.float32)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(20, 6)
        self.heads = nn.ModuleDict({"topic": nn.Linear(6, 3), "score": nn.Linear(6, 1)})

    def forward(self, idx):
        h = self.embed(idx).mean(dim=1)
        return {name: head(h) for name, head in self.heads.items()}


model = Model()
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.tensor(rng.normal(0, 0.3, size=tuple(p.shape)), dtype=torch.float32))
opt = torch.optim.Adam(model.parameters(), lr=0.05)
for step in range(10):
    out = model(tokens)
    loss = F.cross_entropy(out["topic"], topic) + 0.5 * F.mse_loss(out["score"], score)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(step, round(loss.item(), 5))
print(sorted(model.heads.keys()), "topic" in model.heads, len(model.heads))
