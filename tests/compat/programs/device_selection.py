"""The usual device idiom: torch.device, torch.cuda.is_available(), .to(device) for models and data."""
import numpy as np
import torch
import torch.nn as nn

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
rng = np.random.default_rng(33)
model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1)).to(device)
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.tensor(rng.normal(size=tuple(p.shape)), dtype=torch.float32))
x = torch.tensor(rng.normal(size=(5, 3)), dtype=torch.float32).to(device)
y = torch.ones(5, 1, device=device)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for step in range(4):
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
    print(step, round(loss.item(), 6))
print(model(x).cpu().detach().numpy().round(4).tolist())
print(next(model.parameters()).shape, torch.cuda.device_count() >= 0)
