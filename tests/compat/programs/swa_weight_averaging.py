"""Stochastic weight averaging with torch.optim.swa_utils, as in PyTorch's SWA recipe: a model with
BatchNorm trained with SGD, `AveragedModel(model)` updated with `update_parameters` after
`swa_start`, `SWALR(optimizer, swa_lr=..., anneal_epochs=..., anneal_strategy=...)` taking over from
a CosineAnnealingLR, `torch.optim.swa_utils.update_bn(loader, swa_model)` to recompute the
BatchNorm statistics, and an EMA variant with `get_ema_multi_avg_fn`. Data and weights from NumPy."""

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.lr_scheduler import CosineAnnealingLR
from torch.optim.swa_utils import SWALR, AveragedModel, get_ema_multi_avg_fn, update_bn
from torch.utils.data import DataLoader, TensorDataset

rng = np.random.default_rng(12)
x = torch.tensor(rng.normal(size=(32, 5)), dtype=torch.float32)
y = torch.tensor(rng.integers(0, 3, size=32))
loader = DataLoader(TensorDataset(x, y), batch_size=8)

model = nn.Sequential(nn.Linear(5, 12), nn.BatchNorm1d(12), nn.ReLU(), nn.Linear(12, 3))
with torch.no_grad():
    for name, p in model.named_parameters():
        if not name.startswith("1."):  # the BatchNorm keeps its ones and zeros
            p.copy_(torch.tensor(rng.normal(0, 0.4, size=tuple(p.shape)), dtype=torch.float32))

optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
swa_model = AveragedModel(model)
ema_model = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.9))
scheduler = CosineAnnealingLR(optimizer, T_max=10)
swa_start = 3
swa_scheduler = SWALR(optimizer, swa_lr=0.05, anneal_epochs=2, anneal_strategy="linear")

for epoch in range(6):
    for input, target in loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(input), target)
        loss.backward()
        optimizer.step()
        ema_model.update_parameters(model)
    if epoch > swa_start:
        swa_model.update_parameters(model)
        swa_scheduler.step()
    else:
        scheduler.step()
    print(f"epoch {epoch} loss {loss.item():.4f} lr {optimizer.param_groups[0]['lr']:.5f} n_averaged {swa_model.n_averaged.item()}")

# Update bn statistics for the swa_model at the end
print(swa_model.module[1].running_mean[:4])
update_bn(loader, swa_model)
print(swa_model.module[1].running_mean[:4], swa_model.module[1].num_batches_tracked)
swa_model.eval()
ema_model.eval()
with torch.no_grad():
    preds = swa_model(x)
    print(F.cross_entropy(preds, y).item(), ema_model(x)[:2], ema_model.n_averaged)
print([k for k in swa_model.state_dict().keys()][:3], len(list(swa_model.parameters())))

# the running average is the mean of the weights it saw
avg = AveragedModel(nn.Linear(2, 1))
lin = nn.Linear(2, 1)
seen = []
for k in range(3):
    with torch.no_grad():
        lin.weight.fill_(float(k))
    avg.update_parameters(lin)
    seen.append(lin.weight.clone())
print(avg.module.weight.data, torch.stack(seen).mean(0).detach())
