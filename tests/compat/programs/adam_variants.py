"""Adamax, NAdam (with momentum_decay and decoupled weight decay) and RAdam (before and after its
rectification switches on) training the same small regression."""
import numpy as np
import torch
import torch.nn as nn

rng = np.random.default_rng(8)
X = torch.tensor(rng.normal(size=(50, 4)), dtype=torch.float32)
Y = X @ torch.tensor(rng.normal(size=(4, 2)), dtype=torch.float32) + 0.1
init = [rng.normal(0, 0.3, size=s) for s in [(8, 4), (8,), (2, 8), (2,)]]


def run(make, steps=25):
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    with torch.no_grad():
        for p, w in zip(model.parameters(), init):
            p.copy_(torch.tensor(w, dtype=torch.float32))
    optimizer = make(model.parameters())
    for _ in range(steps):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(X), Y)
        loss.backward()
        optimizer.step()
    state = optimizer.state_dict()["state"][0]
    return f"{loss.item():.5f}", sorted(state)


print(run(lambda p: torch.optim.Adamax(p, lr=0.02)))
print(run(lambda p: torch.optim.Adamax(p, lr=0.02, betas=(0.8, 0.99), weight_decay=0.01)))
print(run(lambda p: torch.optim.NAdam(p, lr=0.01)))
print(run(lambda p: torch.optim.NAdam(p, lr=0.01, momentum_decay=0.01, weight_decay=0.05)))
print(run(lambda p: torch.optim.NAdam(p, lr=0.01, weight_decay=0.05, decoupled_weight_decay=True)))
print(run(lambda p: torch.optim.RAdam(p, lr=0.01), steps=4))  # rho_t <= 5: momentum SGD steps
print(run(lambda p: torch.optim.RAdam(p, lr=0.01)))
print(run(lambda p: torch.optim.RAdam(p, lr=0.01, weight_decay=0.1, decoupled_weight_decay=True)))
