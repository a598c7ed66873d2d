"""Save model and optimizer state mid-training, load them into fresh objects, continue: the same
result as training straight through."""
import io

import numpy as np
import torch
import torch.nn as nn

rng = np.random.default_rng(6)
X = torch.tensor(rng.normal(size=(40, 4)), dtype=torch.float32)
Y = torch.tensor(rng.normal(size=(40, 1)), dtype=torch.float32)
weights = [rng.normal(0, 0.5, size=s) for s in [(6, 4), (6,), (1, 6), (1,)]]


def build():
    model = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 1))
    with torch.no_grad():
        for p, w in zip(model.parameters(), weights):
            p.copy_(torch.tensor(w, dtype=torch.float32))
    return model, torch.optim.Adam(model.parameters(), lr=0.02)


def train(model, opt, steps):
    for _ in range(steps):
        opt.zero_grad()
        loss = ((model(X) - Y) ** 2).mean()
        loss.backward()
        opt.step()
    return loss.item()


straight, straight_opt = build()
train(straight, straight_opt, 10)

model, opt = build()
train(model, opt, 5)
buffer = io.BytesIO()
torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": 5}, buffer)
buffer.seek(0)
checkpoint = torch.load(buffer)
resumed, resumed_opt = build()
resumed.load_state_dict(checkpoint["model"])
resumed_opt.load_state_dict(checkpoint["optimizer"])
print("resumed at", checkpoint["step"])
print(train(resumed, resumed_opt, 5))
for a, b in zip(straight.parameters(), resumed.parameters()):
    print(torch.allclose(a, b, atol=1e-6), a.sum().item())
