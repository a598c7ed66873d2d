"""Grad-CAM on a small CNN: a forward hook keeps the last convolution block's activations and
registers a tensor hook on them for their gradient, the class score is backpropagated, the channel
weights are the gradients' spatial means, and the map is upsampled with bilinear F.interpolate;
then gradient clipping by parameter hooks (register_hook on every parameter) during training."""

import torch
import torch.nn as nn
import torch.nn.functional as F
import numpy as np

rng = np.random.default_rng(3)
model = nn.Sequential(
    nn.Conv2d(1, 4, 3, padding=1),
    nn.ReLU(),
    nn.Conv2d(4, 6, 3, padding=1),
    nn.ReLU(),
    nn.AdaptiveAvgPool2d(1),
    nn.Flatten(),
    nn.Linear(6, 3),
)
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.tensor(rng.normal(0, 0.5, size=tuple(p.shape)), dtype=torch.float32))
store = {}


def fwd(module, inp, out):
    store["act"] = out
    out.register_hook(lambda g: store.__setitem__("grad", g))


model[3].register_forward_hook(fwd)
x = torch.tensor(rng.normal(size=(2, 1, 6, 6)), dtype=torch.float32)
logits = model(x)
logits[:, 1].sum().backward()
w = store["grad"].mean((2, 3), keepdim=True)
cam = F.relu((w * store["act"]).sum(1))
cam = F.interpolate(cam.unsqueeze(1), size=(12, 12), mode="bilinear", align_corners=False)
print(cam.shape, cam[0, 0, ::3, ::3].detach(), store["grad"].abs().sum())
# gradient clipping through parameter hooks
for p in model.parameters():
    p.register_hook(lambda grad: torch.clamp(grad, -0.05, 0.05))
model.zero_grad()
F.cross_entropy(model(x), torch.tensor([0, 2])).backward()
print([round(p.grad.abs().max().item(), 5) for p in model.parameters()])
optimizer = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
for step in range(4):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), torch.tensor([0, 2]))
    loss.backward()
    optimizer.step()
    print(step, f"{loss.item():.5f}", f"{model[0].weight.grad.abs().max().item():.5f}")
