"""Linear warm-up then cosine decay (SequentialLR) with Adam."""
import numpy as np
import torch
import torch.nn as nn
from torch.optim.lr_scheduler import CosineAnnealingLR, LinearLR, SequentialLR

rng = np.random.default_rng(11)
X = torch.tensor(rng.normal(size=(20, 4)), dtype=torch.float64)
y = torch.tensor(rng.normal(size=(20, 2)), dtype=torch.float64)
model = nn.Linear(4, 2).double()
with torch.no_grad():
    model.weight.copy_(torch.tensor(rng.normal(size=(2, 4))))
    model.bias.zero_()
opt = torch.optim.Adam(model.parameters(), lr=0.05)
warmup = LinearLR(opt, start_factor=0.1, total_iters=3)
decay = CosineAnnealingLR(opt, T_max=7, eta_min=0.001)
schedule = SequentialLR(opt, schedulers=[warmup, decay], milestones=[3])
for step in range(10):
    opt.zero_grad()
    loss = ((model(X) - y) ** 2).mean()
    loss.backward()
    opt.step()
    schedule.step()
    print(step, schedule.get_last_lr()[0], loss.item())
