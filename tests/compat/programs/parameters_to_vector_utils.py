"""Flat parameter vectors: torch.nn.utils.parameters_to_vector / vector_to_parameters for a
hand-rolled line search and for averaging two models, a flat gradient by cat of views, parameter
counting, and a random-direction loss-landscape slice (directions from NumPy)."""

import numpy as np
import torch
import torch.nn as nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters

rng = np.random.default_rng(44)
X = torch.tensor(rng.normal(size=(40, 3)), dtype=torch.float32)
y = torch.tensor(rng.normal(size=(40, 1)), dtype=torch.float32)
model = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 1))
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.tensor(rng.normal(0, 0.5, size=tuple(p.shape)), dtype=torch.float32))
loss_fn = nn.MSELoss()

theta = parameters_to_vector(model.parameters())
print(theta.shape, sum(p.numel() for p in model.parameters()), theta.requires_grad)
for step in range(5):
    model.zero_grad()
    loss = loss_fn(model(X), y)
    loss.backward()
    flat_grad = torch.cat([p.grad.view(-1) for p in model.parameters()])
    theta = parameters_to_vector(model.parameters()).detach()
    best = None
    for lr in (1.0, 0.5, 0.25, 0.125):
        vector_to_parameters(theta - lr * flat_grad, model.parameters())
        with torch.no_grad():
            trial = loss_fn(model(X), y).item()
        if trial < loss.item():
            best = lr
            break
    if best is None:
        vector_to_parameters(theta, model.parameters())
    print(f"step {step} loss {loss.item():.5f} grad norm {flat_grad.norm():.5f} step size {best}")

other = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 1))
with torch.no_grad():
    for p in other.parameters():
        p.copy_(torch.tensor(rng.normal(0, 0.5, size=tuple(p.shape)), dtype=torch.float32))
avg = 0.5 * (parameters_to_vector(model.parameters()) + parameters_to_vector(other.parameters()))
vector_to_parameters(avg, other.parameters())
print(other[0].bias.data, torch.allclose(parameters_to_vector(other.parameters()), avg))

direction = torch.tensor(rng.normal(size=theta.numel()), dtype=torch.float32)
direction = direction / direction.norm() * theta.norm()
center = parameters_to_vector(model.parameters()).detach()
with torch.no_grad():
    for alpha in (-0.5, 0.0, 0.5):
        vector_to_parameters(center + alpha * direction, model.parameters())
        print(f"alpha {alpha:+.1f} loss {loss_fn(model(X), y).item():.4f}")
