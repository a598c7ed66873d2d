"""Custom weight initialisation with Module.apply and nn.init."""
import torch
import torch.nn as nn


def init_weights(module):
    if isinstance(module, nn.Linear):
        nn.init.constant_(module.weight, 0.1)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)


model = nn.Sequential(nn.Linear(4, 3), nn.LayerNorm(3), nn.Linear(3, 2, bias=False))
model.apply(init_weights)
x = torch.arange(8, dtype=torch.float32).reshape(2, 4)
print(model(x).tolist())
print([round(p.sum().item(), 6) for p in model.parameters()])
visited = []
model.apply(lambda m: visited.append(type(m).__name__))
print(visited)
