"""A two-layer classifier trained with Adadelta (lr=1.0, the paper's setting), then with weight
decay; the optimizer's state names and hyper-parameters printed."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

rng = np.random.default_rng(21)
X = torch.tensor(rng.normal(size=(60, 5)), dtype=torch.float32)
labels = torch.tensor((rng.normal(size=60) > 0).astype(np.int64) + (rng.normal(size=60) > 1).astype(np.int64))


def build(seed):
    r = np.random.default_rng(seed)
    model = nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Linear(16, 3))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.tensor(r.normal(0, 0.4, size=tuple(p.shape)), dtype=torch.float32))
    return model


for options in ({}, {"rho": 0.95, "weight_decay": 1e-3, "eps": 1e-5}):
    model = build(3)
    optimizer = torch.optim.Adadelta(model.parameters(), **options)
    for epoch in range(15):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(X), labels)
        loss.backward()
        optimizer.step()
    accuracy = (model(X).argmax(dim=1) == labels).float().mean()
    print(f"loss {loss.item():.5f} accuracy {accuracy.item():.4f}")
    state = optimizer.state_dict()
    print(sorted(state["state"][0]), state["param_groups"][0]["lr"], state["param_groups"][0]["rho"])
    print(float((state["state"][0]["acc_delta"] ** 2).sum()) > 0, float(state["state"][1]["square_avg"].sum()))
