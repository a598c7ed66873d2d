"""Compare optimizers on one problem, as blog posts do: the same initial weights (a state_dict
copied into fresh models), SGD, SGD with momentum, Adam, AdamW, RMSprop and Adagrad, losses
collected per epoch and printed as an aligned f-string table, then the best optimizer."""

import copy

import numpy as np
import torch
import torch.nn as nn

rng = np.random.default_rng(3)
X = torch.tensor(rng.normal(size=(64, 4)), dtype=torch.float32)
y = torch.tensor(np.sin(rng.normal(size=(64, 4)).sum(1, keepdims=True)), dtype=torch.float32)
base = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))
with torch.no_grad():
    for p in base.parameters():
        p.copy_(torch.tensor(rng.normal(0, 0.4, size=tuple(p.shape)), dtype=torch.float32))
initial = copy.deepcopy(base.state_dict())

optimizers = {
    "SGD": lambda ps: torch.optim.SGD(ps, lr=0.05),
    "SGD+momentum": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9),
    "Adam": lambda ps: torch.optim.Adam(ps, lr=0.01),
    "AdamW": lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.05),
    "RMSprop": lambda ps: torch.optim.RMSprop(ps, lr=0.005),
    "Adagrad": lambda ps: torch.optim.Adagrad(ps, lr=0.1),
}
history = {}
for name, make in optimizers.items():
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))
    model.load_state_dict(initial)
    opt = make(model.parameters())
    losses = []
    for epoch in range(20):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(X), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    history[name] = losses

print(f"{'optimizer':<14}" + "".join(f"{'ep ' + str(e):>9}" for e in (0, 5, 10, 19)))
for name, losses in history.items():
    print(f"{name:<14}" + "".join(f"{losses[e]:>9.4f}" for e in (0, 5, 10, 19)))
best = min(history, key=lambda k: history[k][-1])
print(f"best: {best} ({history[best][-1]:.4e})")
print(f"{torch.tensor(1.23456):.3f} {torch.tensor(-0.5):+.2f} {torch.tensor(2.0).item():8.3f}|")
