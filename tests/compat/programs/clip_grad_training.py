"""Training with gradient clipping; the pre-clip norms are printed."""
import numpy as np
import torch
import torch.nn as nn

rng = np.random.default_rng(13)
X = torch.tensor(rng.normal(size=(16, 4)) * 5, dtype=torch.float32)
Y = torch.tensor(rng.normal(size=(16, 3)) * 5, dtype=torch.float32)
model = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 3))
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.tensor(rng.normal(0, 0.5, size=tuple(p.shape)), dtype=torch.float32))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(6):
    opt.zero_grad()
    loss = ((model(X) - Y) ** 2).mean()
    loss.backward()
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
    after = torch.sqrt(sum((p.grad ** 2).sum() for p in model.parameters()))
    opt.step()
    print(step, f"{loss.item():.5f}", f"{norm.item():.5f}", f"{after.item():.5f}")
