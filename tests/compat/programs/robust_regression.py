"""Regression with outliers under L1, Huber, SmoothL1 and MSE losses."""
import numpy as np
import torch
import torch.nn as nn

rng = np.random.default_rng(23)
x = torch.tensor(rng.uniform(-1, 1, size=(40, 1)), dtype=torch.float64)
y = 3 * x + 1
y[::8] += 10.0
for loss_fn in (nn.L1Loss(), nn.HuberLoss(delta=0.5), nn.SmoothL1Loss(beta=0.5), nn.MSELoss()):
    model = nn.Linear(1, 1).double()
    with torch.no_grad():
        model.weight.fill_(0.0)
        model.bias.fill_(0.0)
    opt = torch.optim.SGD(model.parameters(), lr=0.2)
    for _ in range(50):
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
    print(type(loss_fn).__name__, round(model.weight.item(), 6), round(model.bias.item(), 6), round(loss.item(), 6))
