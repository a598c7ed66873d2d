"""Checkpointing as tutorials write it: a dict with epoch, model_state_dict, optimizer_state_dict
(Adam moments included), scheduler state and the loss, torch.save'd to an in-memory buffer and
torch.load'ed into a new model/optimizer/scheduler; resumed training matches training straight
through, and the loaded optimizer's state is inspected."""

import io

import numpy as np
import torch
import torch.nn as nn

rng = np.random.default_rng(64)
X = torch.tensor(rng.normal(size=(30, 3)), dtype=torch.float32)
Y = torch.tensor(rng.normal(size=(30, 2)), dtype=torch.float32)
init = [rng.normal(0, 0.5, size=s) for s in [(8, 3), (8,), (2, 8), (2,)]]


def build():
    model = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 2))
    with torch.no_grad():
        for p, w in zip(model.parameters(), init):
            p.copy_(torch.tensor(w, dtype=torch.float32))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05, betas=(0.8, 0.99))
    scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.9)
    return model, optimizer, scheduler


def train(model, optimizer, scheduler, epochs):
    for _ in range(epochs):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(X), Y)
        loss.backward()
        optimizer.step()
        scheduler.step()
    return loss


model, optimizer, scheduler = build()
train(model, optimizer, scheduler, 10)
reference = train(model, optimizer, scheduler, 5).item()

model, optimizer, scheduler = build()
loss = train(model, optimizer, scheduler, 10)
buffer = io.BytesIO()
torch.save(
    {
        "epoch": 10,
        "model_state_dict": model.state_dict(),
        "optimizer_state_dict": optimizer.state_dict(),
        "scheduler_state_dict": scheduler.state_dict(),
        "loss": loss.item(),
    },
    buffer,
)
buffer.seek(0)
checkpoint = torch.load(buffer)
model2, optimizer2, scheduler2 = build()
model2.load_state_dict(checkpoint["model_state_dict"])
optimizer2.load_state_dict(checkpoint["optimizer_state_dict"])
scheduler2.load_state_dict(checkpoint["scheduler_state_dict"])
print("resumed from epoch", checkpoint["epoch"], f"loss {checkpoint['loss']:.5f}")
model2.train()
resumed = train(model2, optimizer2, scheduler2, 5).item()
print(f"straight {reference:.6f} resumed {resumed:.6f}")
state = optimizer2.state_dict()
print(sorted(state["state"][0].keys()), int(state["state"][0]["step"]), state["param_groups"][0]["betas"])
print(f"lr {scheduler2.get_last_lr()[0]:.6f}", scheduler2.last_epoch)
print(all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), checkpoint["model_state_dict"].values())))
