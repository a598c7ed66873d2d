"""The optimizer step fused into the backward pass (PyTorch's tutorial on saving memory): one Adam per
parameter, stepped and zeroed from Tensor.register_post_accumulate_grad_hook as soon as the
parameter's gradient is accumulated; the hooks' firing order is printed, then they are removed."""

import torch
import torch.nn as nn
import numpy as np

rng = np.random.default_rng(9)
model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.tensor(rng.normal(0, 0.5, size=tuple(p.shape)), dtype=torch.float32))
optimizer_dict = {p: torch.optim.Adam([p], lr=0.05) for p in model.parameters()}
order = []
names = {p: n for n, p in model.named_parameters()}


def optimizer_hook(parameter) -> None:
    order.append(names[parameter])
    optimizer_dict[parameter].step()
    optimizer_dict[parameter].zero_grad()


handles = [p.register_post_accumulate_grad_hook(optimizer_hook) for p in model.parameters()]
x = torch.tensor(rng.normal(size=(16, 4)), dtype=torch.float32)
y = torch.tensor(rng.normal(size=(16, 2)), dtype=torch.float32)
for step in range(5):
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    print(step, f"{loss.item():.6f}", [p.grad for p in model.parameters()][0])
print(order[:4])
for h in handles:
    h.remove()
loss = nn.functional.mse_loss(model(x), y)
loss.backward()
print(model[0].weight.grad.abs().sum(), len(order))
