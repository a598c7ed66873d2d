"""Gradient accumulation over micro-batches equals one big batch."""
import numpy as np
import torch
import torch.nn as nn

rng = np.random.default_rng(4)
X = torch.tensor(rng.normal(size=(32, 5)), dtype=torch.float64)
Y = torch.tensor(rng.normal(size=(32, 2)), dtype=torch.float64)


def fresh_model():
    model = nn.Linear(5, 2).double()
    with torch.no_grad():
        model.weight.copy_(torch.tensor(np.linspace(-1, 1, 10).reshape(2, 5)))
        model.bias.fill_(0.1)
    return model


big = fresh_model()
loss = nn.functional.mse_loss(big(X), Y)
loss.backward()

small = fresh_model()
for chunk_x, chunk_y in zip(X.chunk(4), Y.chunk(4)):
    part = nn.functional.mse_loss(small(chunk_x), chunk_y) / 4
    part.backward()

print(big.weight.grad.sum().item(), small.weight.grad.sum().item())
print(torch.allclose(big.weight.grad, small.weight.grad), torch.allclose(big.bias.grad, small.bias.grad))
opt = torch.optim.SGD(small.parameters(), lr=0.5, momentum=0.9)
for step in range(3):
    opt.zero_grad()
    for chunk_x, chunk_y in zip(X.chunk(4), Y.chunk(4)):
        (nn.functional.mse_loss(small(chunk_x), chunk_y) / 4).backward()
    opt.step()
    print(step, nn.functional.mse_loss(small(X), Y).item())
