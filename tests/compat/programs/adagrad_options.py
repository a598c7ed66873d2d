"""Adagrad's options: lr_decay, initial_accumulator_value, weight decay and maximize, on a
least-squares problem; the accumulated sums printed."""
import numpy as np
import torch

rng = np.random.default_rng(31)
A = torch.tensor(rng.normal(size=(8, 5)))
b = torch.tensor(rng.normal(size=8))


def run(**options):
    x = torch.zeros(5, dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.Adagrad([x], lr=0.2, **options)
    for _ in range(12):
        optimizer.zero_grad()
        loss = ((A @ x - b) ** 2).sum()
        (-loss if options.get("maximize") else loss).backward()
        optimizer.step()
    total = optimizer.state_dict()["state"][0]["sum"]
    return round(loss.item(), 6), [round(v, 5) for v in total.tolist()]


print(run())
print(run(lr_decay=0.1))
print(run(initial_accumulator_value=0.5))
print(run(weight_decay=0.2, eps=1e-6))
print(run(maximize=True))
