"""The "learning PyTorch with examples" progression on one problem, fitting sin(x) with a cubic:
first raw tensors with the gradients written out by hand, then autograd with the update under
torch.no_grad() and grad.zero_(), then nn.Sequential with a Flatten over x.unsqueeze(-1).pow(p)."""

import math

import torch

dtype = torch.float
x = torch.linspace(-math.pi, math.pi, 500, dtype=dtype)
y = torch.sin(x)
start = [0.1, -0.2, 0.05, -0.1]
learning_rate = 1e-6

a, b, c, d = (torch.tensor(v, dtype=dtype) for v in start)
for t in range(300):
    y_pred = a + b * x + c * x**2 + d * x**3
    loss = (y_pred - y).pow(2).sum().item()
    if t % 100 == 99:
        print("manual", t, round(loss, 3))
    grad_y_pred = 2.0 * (y_pred - y)
    grad_a = grad_y_pred.sum()
    grad_b = (grad_y_pred * x).sum()
    grad_c = (grad_y_pred * x**2).sum()
    grad_d = (grad_y_pred * x**3).sum()
    a -= learning_rate * grad_a
    b -= learning_rate * grad_b
    c -= learning_rate * grad_c
    d -= learning_rate * grad_d
print(f"Result: y = {a.item():.5f} + {b.item():.5f} x + {c.item():.5f} x^2 + {d.item():.5f} x^3")

a, b, c, d = (torch.tensor(v, dtype=dtype, requires_grad=True) for v in start)
for t in range(300):
    y_pred = a + b * x + c * x**2 + d * x**3
    loss = (y_pred - y).pow(2).sum()
    if t % 100 == 99:
        print("autograd", t, round(loss.item(), 3))
    loss.backward()
    with torch.no_grad():
        for p in (a, b, c, d):
            p -= learning_rate * p.grad
            p.grad.zero_()
print(f"Result: y = {a.item():.5f} + {b.item():.5f} x + {c.item():.5f} x^2 + {d.item():.5f} x^3")

p = torch.tensor([1, 2, 3])
xx = x.unsqueeze(-1).pow(p)
print(xx.shape)
model = torch.nn.Sequential(torch.nn.Linear(3, 1), torch.nn.Flatten(0, 1))
with torch.no_grad():
    model[0].weight.copy_(torch.tensor([start[1:]]))
    model[0].bias.fill_(start[0])
loss_fn = torch.nn.MSELoss(reduction="sum")
for t in range(300):
    loss = loss_fn(model(xx), y)
    if t % 100 == 99:
        print("nn", t, round(loss.item(), 3))
    model.zero_grad()
    loss.backward()
    with torch.no_grad():
        for param in model.parameters():
            param -= learning_rate * param.grad
linear_layer = model[0]
print(
    f"Result: y = {linear_layer.bias.item():.5f} + {linear_layer.weight[:, 0].item():.5f} x + "
    f"{linear_layer.weight[:, 1].item():.5f} x^2 + {linear_layer.weight[:, 2].item():.5f} x^3"
)
