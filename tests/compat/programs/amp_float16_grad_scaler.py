"""Mixed precision in float16 with dynamic loss scaling: torch.autocast("cpu", dtype=torch.float16),
torch.amp.GradScaler("cpu"). The first scales overflow float16 gradients: those steps are skipped and
the scale backs off, then grows again after growth_interval clean steps; a checkpoint of the scaler."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

rng = np.random.default_rng(5)
X = torch.tensor(rng.normal(size=(32, 6)) * 8, dtype=torch.float32)
Y = torch.tensor(rng.normal(size=(32, 2)) * 8, dtype=torch.float32)
model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 2))
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.tensor(rng.normal(0, 0.5, size=tuple(p.shape)), dtype=torch.float32))
opt = torch.optim.SGD(model.parameters(), lr=0.002, momentum=0.9)
scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16, growth_interval=3)
for step in range(12):
    before = model[0].weight.clone().detach()
    with torch.autocast(device_type="cpu", dtype=torch.float16):
        out = model(X)
        loss = F.mse_loss(out, Y)
    print(step, out.dtype == torch.float16, loss.dtype == torch.float32, f"{loss.item():.3g}")
    opt.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    stepped = not torch.equal(before, model[0].weight.detach())
    print("  scale", scaler.get_scale(), "stepped", stepped, "grad fp32", model[0].weight.grad.dtype == torch.float32)
state = scaler.state_dict()
print(state["scale"], state["_growth_tracker"], state["growth_interval"], state["backoff_factor"])
resumed = torch.amp.GradScaler("cpu")
resumed.load_state_dict(state)
print(resumed.get_scale(), resumed.get_growth_interval())
