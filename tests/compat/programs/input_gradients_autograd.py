"""torch.autograd.grad beyond backward(): saliency (the gradient of a class score with respect to
the input), a Jacobian built row by row with retain_graph=True, grad_outputs for a vector-Jacobian
product, allow_unused for an input the output does not depend on, and an adversarial (FGSM) step
x + eps * sign(grad) that raises the loss."""

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

rng = np.random.default_rng(23)
model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.tensor(rng.normal(0, 0.5, size=tuple(p.shape)), dtype=torch.float32))
x = torch.tensor(rng.normal(size=(5, 4)), dtype=torch.float32)
labels = torch.tensor([0, 1, 2, 1, 0])

inp = x.clone().requires_grad_(True)
scores = model(inp)
top = scores.argmax(dim=1)
(saliency,) = torch.autograd.grad(scores.gather(1, top.unsqueeze(1)).sum(), inp)
print(top, saliency.abs().argmax(dim=1), saliency[0])
print(model[0].weight.grad is None, inp.grad is None)

point = x[0].clone().requires_grad_(True)
out = model(point)
rows = [torch.autograd.grad(out[i], point, retain_graph=True)[0] for i in range(3)]
jacobian = torch.stack(rows)
print(jacobian.shape, jacobian[1])
v = torch.tensor([1.0, -2.0, 0.5])
(vjp,) = torch.autograd.grad(out, point, grad_outputs=v)
print(torch.allclose(vjp, v @ jacobian, atol=1e-6), vjp)

a = torch.tensor([1.0, 2.0], requires_grad=True)
b = torch.tensor(0.5, requires_grad=True)
y = torch.stack([a[0] * a[1], a[0] ** 2])
ga, gb = torch.autograd.grad(y.sum(), [a, b], allow_unused=True)
print(ga, gb)

eps = 0.1
adv = x.clone().requires_grad_(True)
loss = F.cross_entropy(model(adv), labels)
(g,) = torch.autograd.grad(loss, adv)
x_adv = (adv + eps * g.sign()).detach()
with torch.no_grad():
    print(f"clean loss {loss.item():.4f} adversarial loss {F.cross_entropy(model(x_adv), labels).item():.4f}")
    print((x_adv - x).abs().max().item())
