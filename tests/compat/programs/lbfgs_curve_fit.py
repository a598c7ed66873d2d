"""L-BFGS with and without the strong-Wolfe line search: fitting y = a * exp(-b t) + c to noisy
points, and minimizing the Rosenbrock function, with step(closure)."""
import numpy as np
import torch

rng = np.random.default_rng(11)
t = torch.tensor(np.linspace(0, 4, 40))
y = 2.5 * torch.exp(-1.3 * t) + 0.4 + torch.tensor(rng.normal(0, 0.02, size=40))

params = torch.tensor([1.0, 1.0, 0.0], dtype=torch.float64, requires_grad=True)
optimizer = torch.optim.LBFGS([params], lr=1, max_iter=50, line_search_fn="strong_wolfe")


def closure():
    optimizer.zero_grad()
    a, b, c = params
    loss = ((a * torch.exp(-b * t) + c - y) ** 2).mean()
    loss.backward()
    return loss


for step in range(3):
    loss = optimizer.step(closure)
    print(step, f"{loss.item():.8f}", [round(v, 5) for v in params.tolist()])
print("evaluations", optimizer.state_dict()["state"][0]["func_evals"], optimizer.state_dict()["state"][0]["n_iter"])

x = torch.tensor([-1.5, 2.0], dtype=torch.float64, requires_grad=True)
plain = torch.optim.LBFGS([x], lr=0.1, max_iter=10, history_size=5)


def rosenbrock():
    plain.zero_grad()
    loss = (1 - x[0]) ** 2 + 100 * (x[1] - x[0] ** 2) ** 2
    loss.backward()
    return loss


for step in range(4):
    loss = plain.step(rosenbrock)
    print(step, f"{loss.item():.6f}", [round(v, 6) for v in x.tolist()])
print(plain.param_groups[0]["max_eval"], plain.param_groups[0]["tolerance_grad"])
