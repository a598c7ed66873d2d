"""RMSprop (centered, momentum) and Adagrad on the same problem."""
import numpy as np
import torch

rng = np.random.default_rng(12)
A = torch.tensor(rng.normal(size=(6, 6)))
target = torch.tensor(rng.normal(size=6))


def run(make_optimizer):
    x = torch.zeros(6, dtype=torch.float64, requires_grad=True)
    opt = make_optimizer([x])
    for _ in range(15):
        opt.zero_grad()
        loss = ((A @ x - target) ** 2).sum()
        loss.backward()
        opt.step()
    return loss.item(), x.detach().tolist()


print(run(lambda p: torch.optim.RMSprop(p, lr=0.01)))
print(run(lambda p: torch.optim.RMSprop(p, lr=0.01, momentum=0.5, centered=True)))
print(run(lambda p: torch.optim.Adagrad(p, lr=0.3)))
print(run(lambda p: torch.optim.Adam(p, lr=0.1, amsgrad=True)))
print(run(lambda p: torch.optim.SGD(p, lr=0.005, momentum=0.9, nesterov=True)))
