"""A custom autograd Function: P3(x) = (5x^3 - 3x) / 2 with its own backward, fitting sin(x) with
y = a + b * P3(c + d * x) and plain gradient descent."""
import math

import numpy as np
import torch


class LegendrePolynomial3(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input):
        ctx.save_for_backward(input)
        return 0.5 * (5 * input**3 - 3 * input)

    @staticmethod
    def backward(ctx, grad_output):
        (input,) = ctx.saved_tensors
        return grad_output * 1.5 * (5 * input**2 - 1)


dtype = torch.float64
x = torch.linspace(-math.pi, math.pi, 200, dtype=dtype)
y = torch.sin(x)

a = torch.full((), 0.0, dtype=dtype, requires_grad=True)
b = torch.full((), -1.0, dtype=dtype, requires_grad=True)
c = torch.full((), 0.0, dtype=dtype, requires_grad=True)
d = torch.full((), 0.3, dtype=dtype, requires_grad=True)

learning_rate = 5e-6
for t in range(300):
    P3 = LegendrePolynomial3.apply
    y_pred = a + b * P3(c + d * x)
    loss = (y_pred - y).pow(2).sum()
    if t == 0:
        print(type(y_pred.grad_fn).__name__, y_pred.requires_grad, y_pred.is_leaf)
    if t % 100 == 99:
        print(t, round(loss.item(), 6))
    loss.backward()
    with torch.no_grad():
        for p in (a, b, c, d):
            p -= learning_rate * p.grad
            p.grad = None

print(f"Result: y = {a.item():.6f} + {b.item():.6f} * P3({c.item():.6f} + {d.item():.6f} x)")
rng = np.random.default_rng(0)
probe = torch.tensor(rng.uniform(-1, 1, size=5), requires_grad=True)
LegendrePolynomial3.apply(probe).sum().backward()
print(probe.grad)

from torch.autograd import gradcheck

check_input = (torch.tensor(rng.normal(size=(3, 2)), dtype=torch.double, requires_grad=True),)
print("gradcheck:", gradcheck(LegendrePolynomial3.apply, check_input, eps=1e-6, atol=1e-4))
