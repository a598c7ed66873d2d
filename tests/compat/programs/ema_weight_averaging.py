"""An exponential moving average of a model's weights, as training scripts keep one for evaluation:
a deepcopy of the model with requires_grad_(False), updated after each step with
ema_p.lerp_(p, 1 - decay) (and the mul_/add_ form checked against it), a warmup-adjusted decay,
buffers copied over, and the EMA model's loss next to the raw model's."""

import copy

import numpy as np
import torch
import torch.nn as nn

rng = np.random.default_rng(17)
X = torch.tensor(rng.normal(size=(48, 3)), dtype=torch.float32)
y = torch.tensor(rng.normal(size=(48, 1)), dtype=torch.float32) + X[:, :1] * 2
model = nn.Sequential(nn.Linear(3, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 1))
with torch.no_grad():
    for name, p in model.named_parameters():
        if p.dim() > 1 or name.startswith("0.") or name.startswith("3."):
            p.copy_(torch.tensor(rng.normal(0, 0.4, size=tuple(p.shape)), dtype=torch.float32))

ema = copy.deepcopy(model)
ema.eval()
for p in ema.parameters():
    p.requires_grad_(False)
manual = [p.detach().clone() for p in model.parameters()]


@torch.no_grad()
def update_ema(step, decay=0.95):
    d = min(decay, (1 + step) / (10 + step))
    for ema_p, p in zip(ema.parameters(), model.parameters()):
        ema_p.lerp_(p, 1 - d)
    for m, p in zip(manual, model.parameters()):
        m.mul_(d).add_(p.detach(), alpha=1 - d)
    for ema_b, b in zip(ema.buffers(), model.buffers()):
        ema_b.copy_(b)
    return d


opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
loss_fn = nn.MSELoss()
for step in range(30):
    model.train()
    loss = loss_fn(model(X), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    d = update_ema(step)
    if step % 10 == 9:
        model.eval()
        with torch.no_grad():
            raw, avg = loss_fn(model(X), y).item(), loss_fn(ema(X), y).item()
        print(f"step {step + 1} decay {d:.4f} train {loss.item():.4f} eval raw {raw:.4f} ema {avg:.4f}")
print(all(torch.allclose(a, b, atol=1e-6) for a, b in zip(ema.parameters(), manual)))
print(any(p.requires_grad for p in ema.parameters()), ema[1].num_batches_tracked.item(), ema.training)
print(ema[3].weight)
