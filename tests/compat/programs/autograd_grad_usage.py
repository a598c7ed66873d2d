"""torch.autograd.grad: input gradients (saliency) without touching .grad, gradients with respect
to an intermediate, grad_outputs weighting, allow_unused; torch.autograd.backward with several
roots; grad_fn and next_functions names."""
import numpy as np
import torch
import torch.nn as nn

rng = np.random.default_rng(13)
model = nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 1))
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.tensor(rng.normal(0, 0.5, size=tuple(p.shape)), dtype=torch.float32))

x = torch.tensor(rng.normal(size=(3, 4)), dtype=torch.float32, requires_grad=True)
hidden = model[1](model[0](x))
out = model[2](hidden)
print(type(out.grad_fn).__name__ in ("AddmmBackward0", "AddBackward0", "LinearBackward0"), x.grad_fn, x.is_leaf)
saliency, d_hidden = torch.autograd.grad(out.sum(), [x, hidden], retain_graph=True)
print(saliency)
print(d_hidden.shape, model[0].weight.grad)
(weighted,) = torch.autograd.grad(out, x, grad_outputs=torch.tensor([[1.0], [0.0], [2.0]]), retain_graph=True)
print(weighted[1].abs().sum().item(), weighted[2].tolist() == (2 * saliency[2]).tolist())
unused = torch.zeros(2, requires_grad=True)
gx, gu = torch.autograd.grad(out.sum(), [x, unused], allow_unused=True)
print(gu is None, torch.allclose(gx, saliency))

a = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
b = a * 2
c = b * b + a
print(type(c.grad_fn).__name__, [type(f).__name__ if f is not None else None for f, _ in c.grad_fn.next_functions])
print(type(b.grad_fn).__name__, b.grad_fn.next_functions[0][0].variable is a)
torch.autograd.backward([c.sum(), (a**2).sum()])
print(a.grad)
