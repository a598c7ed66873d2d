"""Two outputs from a shared trunk, weighted losses, per-parameter-group learning rates."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

rng = np.random.default_rng(31)
x = torch.tensor(rng.normal(size=(10, 4)), dtype=torch.float32)
cls = torch.tensor(rng.integers(0, 2, size=10))
reg = torch.tensor(rng.normal(size=(10, 1)), dtype=torch.float32)
trunk = nn.Sequential(nn.Linear(4, 6), nn.ReLU())
cls_head, reg_head = nn.Linear(6, 2), nn.Linear(6, 1)
for module in (trunk, cls_head, reg_head):
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.tensor(rng.normal(0, 0.5, size=tuple(p.shape)), dtype=torch.float32))
opt = torch.optim.SGD([{"params": trunk.parameters(), "lr": 0.05},
                       {"params": list(cls_head.parameters()) + list(reg_head.parameters())}], lr=0.2, momentum=0.5)
for step in range(6):
    h = trunk(x)
    loss = F.cross_entropy(cls_head(h), cls) + 0.3 * F.mse_loss(reg_head(h), reg)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(step, f"{loss.item():.6f}")
print([g["lr"] for g in opt.param_groups])
