"""Evaluation under torch.inference_mode (as a context manager and as a decorator), after training a
small regression network."""
import numpy as np
import torch
from torch import nn

rng = np.random.default_rng(3)
X = torch.tensor(rng.uniform(-1, 1, size=(40, 2)), dtype=torch.float32)
y = (X[:, :1] * X[:, 1:] + 0.5 * X[:, :1])

model = nn.Sequential(nn.Linear(2, 16), nn.Tanh(), nn.Linear(16, 1))
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.tensor(rng.normal(0, 0.5, size=tuple(p.shape)), dtype=torch.float32))
opt = torch.optim.Adam(model.parameters(), lr=0.02)
for step in range(60):
    loss = nn.functional.mse_loss(model(X), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"train loss {loss:.5f}")

with torch.inference_mode():
    pred = model(X)
    print(pred.requires_grad, torch.is_inference_mode_enabled(), torch.is_grad_enabled())
    print(f"{nn.functional.mse_loss(pred, y):.5f}")
print(torch.is_inference_mode_enabled(), torch.is_grad_enabled())


@torch.inference_mode()
def predict(inputs):
    return model(inputs)


@torch.inference_mode
def predict_bare(inputs):
    return model(inputs)


grid = torch.tensor([[0.5, 0.5], [-0.5, 0.25], [0.0, 1.0]])
out = predict(grid)
print(out.requires_grad, [round(v, 4) for v in out.squeeze(1).tolist()])
print(torch.allclose(out, predict_bare(grid)))
with torch.inference_mode(mode=False):
    print(model(grid).requires_grad)
