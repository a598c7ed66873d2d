"""An MLP fitting a smooth function with MSELoss and SGD."""
import numpy as np
import torch
import torch.nn as nn

rng = np.random.default_rng(0)
x = torch.tensor(rng.uniform(-2, 2, size=(64, 1)), dtype=torch.float32)
y = torch.sin(x) + 0.1 * x ** 2

model = nn.Sequential(nn.Linear(1, 16), nn.Tanh(), nn.Linear(16, 1))
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.tensor(rng.normal(0, 0.5, size=tuple(p.shape)), dtype=torch.float32))

loss_fn = nn.MSELoss()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(40):
    opt.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()
    if step % 10 == 0:
        print(f"step {step} loss {loss.item():.6f}")
print("final", round(loss_fn(model(x), y).item(), 5))
