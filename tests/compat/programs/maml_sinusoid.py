"""MAML on sinusoid regression (Finn et al.'s toy task): a functional MLP (F.linear with an explicit
parameter list), an inner SGD step with torch.autograd.grad(create_graph=True), the meta-loss on the
query set backpropagated through the inner step (second-order), Adam as the meta-optimizer; a
first-order variant (create_graph=False) for comparison, and the Hessian-vector product check."""

import numpy as np
import torch
import torch.nn.functional as F

rng = np.random.default_rng(12)
sizes = [(1, 16), (16, 16), (16, 1)]
params = []
for fan_in, fan_out in sizes:
    params.append(
        torch.tensor(rng.normal(0, 1 / np.sqrt(fan_in), size=(fan_out, fan_in)), dtype=torch.float32).requires_grad_()
    )
    params.append(torch.zeros(fan_out, requires_grad=True))


def net(x, weights):
    for i in range(0, len(weights) - 2, 2):
        x = F.relu(F.linear(x, weights[i], weights[i + 1]))
    return F.linear(x, weights[-2], weights[-1])


def task():
    amp, phase = rng.uniform(0.5, 3.0), rng.uniform(0, np.pi)
    xs = rng.uniform(-5, 5, size=(20, 1))
    ys = amp * np.sin(xs + phase)
    t = lambda a: torch.tensor(a, dtype=torch.float32)  # noqa: E731
    return t(xs[:10]), t(ys[:10]), t(xs[10:]), t(ys[10:])


meta_opt = torch.optim.Adam(params, lr=0.005)
inner_lr = 0.02
for step in range(6):
    meta_opt.zero_grad()
    meta_loss = 0.0
    for _ in range(3):
        xs, ys, xq, yq = task()
        support_loss = F.mse_loss(net(xs, params), ys)
        grads = torch.autograd.grad(support_loss, params, create_graph=True)
        fast = [p - inner_lr * g for p, g in zip(params, grads)]
        meta_loss = meta_loss + F.mse_loss(net(xq, fast), yq)
    (meta_loss / 3).backward()
    meta_opt.step()
    print(step, f"meta {meta_loss.item() / 3:.5f}", f"grad {params[0].grad.norm().item():.5f}")

xs, ys, xq, yq = task()
loss = F.mse_loss(net(xs, params), ys)
first = torch.autograd.grad(loss, params, retain_graph=True)
grads = torch.autograd.grad(loss, params, create_graph=True)
second_order = torch.autograd.grad(F.mse_loss(net(xq, [p - inner_lr * g for p, g in zip(params, grads)]), yq), params)
first_order = torch.autograd.grad(
    F.mse_loss(net(xq, [p - inner_lr * g.detach() for p, g in zip(params, grads)]), yq), params
)
print([f"{(a - b).norm().item():.6f}" for a, b in zip(second_order, first_order)])
print(f"{first[0].norm().item():.5f}", f"{grads[-1].item():.5f}")
v = [torch.ones_like(p) for p in params]
fresh = torch.autograd.grad(F.mse_loss(net(xs, params), ys), params, create_graph=True)
hvp = torch.autograd.grad(fresh, params, grad_outputs=v, allow_unused=True)
print([None if h is None else f"{h.sum().item():.5f}" for h in hvp])
