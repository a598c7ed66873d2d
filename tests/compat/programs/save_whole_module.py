"""Saving a whole module (not just its state_dict) with torch.save, and loading it back: refused
by default (weights_only=True since PyTorch 2.6), accepted with weights_only=False; a state dict
still loads with the default."""
import io
import pickle

import numpy as np
import torch
import torch.nn as nn


def build(hidden):
    return nn.Sequential(nn.Linear(3, hidden), nn.ReLU(), nn.Linear(hidden, 1), nn.Tanh())


rng = np.random.default_rng(9)
model = build(6)
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.tensor(rng.normal(0, 0.5, size=tuple(p.shape)), dtype=torch.float32))
x = torch.tensor(rng.normal(size=(4, 3)), dtype=torch.float32)

buffer = io.BytesIO()
torch.save(model, buffer)
buffer.seek(0)
try:
    torch.load(buffer)
    print("loaded with weights_only=True")
except pickle.UnpicklingError:
    print("refused with weights_only=True")
buffer.seek(0)
restored = torch.load(buffer, weights_only=False)
print(type(restored).__name__, len(restored), restored[0].out_features, restored.training)
print(restored(x).detach().flatten().tolist())
print(torch.equal(restored(x), model(x)), restored[2].bias.tolist())

restored.train()
optimizer = torch.optim.SGD(restored.parameters(), lr=0.1)
loss = restored(x).pow(2).mean()
loss.backward()
optimizer.step()
print(f"{loss.item():.6f}", f"{restored(x).pow(2).mean().item():.6f}")

state = io.BytesIO()
torch.save({"model": restored.state_dict(), "epoch": 3}, state)
state.seek(0)
checkpoint = torch.load(state)
fresh = build(6)
fresh.load_state_dict(checkpoint["model"])
print(checkpoint["epoch"], torch.allclose(fresh(x), restored(x)))
