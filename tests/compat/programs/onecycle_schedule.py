"""OneCycleLR with SGD momentum: the learning rate and momentum per step, and the loss."""
import numpy as np
import torch
import torch.nn as nn

rng = np.random.default_rng(10)
X = torch.tensor(rng.normal(size=(30, 3)), dtype=torch.float32)
y = X.sum(dim=1, keepdim=True)
model = nn.Linear(3, 1)
with torch.no_grad():
    model.weight.fill_(0.1)
    model.bias.fill_(0.0)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=12)
for step in range(12):
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(X), y)
    loss.backward()
    opt.step()
    sched.step()
    group = opt.param_groups[0]
    print(step, f"{group['lr']:.6f}", f"{group['momentum']:.4f}", f"{loss.item():.6f}")
