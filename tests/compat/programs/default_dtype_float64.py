"""A least-squares polynomial fit in double precision by changing the default dtype, as scientific
tutorials do: every factory and Python float then gives float64."""
import math

import torch

torch.set_default_dtype(torch.float64)
print(torch.get_default_dtype() == torch.float64)

x = torch.linspace(-math.pi, math.pi, 200)
y = torch.sin(x)
print(x.dtype == torch.float64, torch.tensor([0.5]).dtype == torch.float64, torch.zeros(1).dtype == torch.float64)

a, b, c, d = (torch.zeros((), requires_grad=True) for _ in range(4))
learning_rate = 1e-6
for t in range(2000):
    y_pred = a + b * x + c * x ** 2 + d * x ** 3
    loss = (y_pred - y).pow(2).sum()
    if t % 500 == 499:
        print(t, f"{loss.item():.10f}")
    loss.backward()
    with torch.no_grad():
        for p in (a, b, c, d):
            p -= learning_rate * p.grad
            p.grad = None
print(f"Result: y = {a.item():.8f} + {b.item():.8f} x + {c.item():.8f} x^2 + {d.item():.8f} x^3")

layer = torch.nn.Linear(3, 1)
print(layer.weight.dtype == torch.float64, (torch.arange(4) / 3).dtype == torch.float64)
print(f"{(torch.arange(4) / 3)[1]:.15f}")
torch.set_default_dtype(torch.float32)
print(torch.tensor([0.1]).dtype == torch.float32, f"{torch.tensor(0.1).item():.10f}")
