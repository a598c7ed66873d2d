"""nn's containers in one model: ModuleDict of per-task heads, ModuleList of blocks, per-layer scales
and per-task offsets registered by name, add_module and register_parameter/register_buffer,
iteration and membership, named_parameters prefixes, children vs modules, and state_dict keys."""

import numpy as np
import torch
import torch.nn as nn


class MultiTask(nn.Module):
    def __init__(self, d=4, depth=3):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(d, d) for _ in range(depth)])
        for i in range(depth):
            self.register_parameter(f"scale{i}", nn.Parameter(torch.ones(d) * (i + 1)))
        self.heads = nn.ModuleDict({"regress": nn.Linear(d, 1), "classify": nn.Linear(d, 3)})
        self.offsets = {"regress": nn.Parameter(torch.zeros(1))}
        self.offset_regress = self.offsets["regress"]
        self.add_module("act", nn.Tanh())
        self.register_parameter("temperature", nn.Parameter(torch.tensor(1.5)))
        self.register_buffer("calls", torch.zeros((), dtype=torch.long))

    def forward(self, x, task):
        scales = [getattr(self, f"scale{i}") for i in range(len(self.blocks))]
        for block, scale in zip(self.blocks, scales):
            x = self.act(block(x)) * scale
        out = self.heads[task](x)
        if task in self.offsets:
            out = out + self.offsets[task]
        else:
            out = out / self.temperature
        self.calls += 1
        return out


model = MultiTask()
model.blocks.append(nn.Linear(4, 4))
model.register_parameter("scale3", nn.Parameter(torch.full((4,), 0.5)))
rng = np.random.default_rng(51)
with torch.no_grad():
    for name, p in model.named_parameters():
        if name.endswith("weight"):
            p.copy_(torch.tensor(rng.normal(0, 0.5, size=tuple(p.shape)), dtype=torch.float32))
        elif name.endswith("bias"):
            p.zero_()
print(len(model.blocks), list(model.heads.keys()), "regress" in model.heads, "other" in model.heads)
print([name for name, _ in model.named_parameters()][:6])
print(len(list(model.parameters())), len(list(model.children())), len(list(model.modules())))
print(sorted(model.state_dict().keys())[-4:])
x = torch.tensor(rng.normal(size=(5, 4)), dtype=torch.float32)
opt = torch.optim.Adam(model.parameters(), lr=0.05)
target_r = torch.tensor(rng.normal(size=(5, 1)), dtype=torch.float32)
target_c = torch.tensor([0, 1, 2, 1, 0])
for step in range(8):
    loss = nn.functional.mse_loss(model(x, "regress"), target_r) + nn.functional.cross_entropy(
        model(x, "classify"), target_c
    )
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 3 == 0:
        print(step, f"{loss.item():.4f}")
print(model.calls.item(), model.temperature.item(), model.scale3, model.offset_regress.grad)
for key, head in model.heads.items():
    print(key, head.out_features)
