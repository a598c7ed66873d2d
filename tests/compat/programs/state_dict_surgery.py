"""Editing weights through state_dict(), partial loads with strict=False."""
import torch
import torch.nn as nn

model = nn.Sequential(nn.Linear(3, 2), nn.Linear(2, 1))
state = model.state_dict()
print(list(state.keys()))
state["0.weight"].copy_(torch.ones(2, 3))  # entries share memory with the model
state["0.bias"].zero_()
with torch.no_grad():
    model[1].weight.fill_(0.5)
    model[1].bias.fill_(-1.0)
print(model(torch.ones(1, 3)).item(), model[0].weight.sum().item(), state["0.weight"].requires_grad)
other = nn.Sequential(nn.Linear(3, 2), nn.Linear(2, 1))
other.load_state_dict(model.state_dict())
print(other(torch.ones(1, 3)).item())
partial = {"0.weight": torch.full((2, 3), 2.0)}
other.load_state_dict(partial, strict=False)
print(other(torch.ones(1, 3)).item())
try:
    other.load_state_dict(partial)
    print("loaded")
except Exception:
    print("strict load refused")
