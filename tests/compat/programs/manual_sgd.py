"""Linear regression by hand: tensors with requires_grad, the update in place under no_grad."""
import numpy as np
import torch

rng = np.random.default_rng(3)
X = torch.tensor(rng.normal(size=(50, 3)))
true_w = torch.tensor([[1.5], [-2.0], [0.5]], dtype=torch.float64)
y = X @ true_w + 0.3

w = torch.zeros(3, 1, dtype=torch.float64, requires_grad=True)
b = torch.zeros(1, dtype=torch.float64, requires_grad=True)
lr = 0.1
for epoch in range(60):
    loss = ((X @ w + b - y) ** 2).mean()
    loss.backward()
    with torch.no_grad():
        w -= lr * w.grad
        b -= lr * b.grad
        w.grad.zero_()
        b.grad.zero_()
    if epoch % 15 == 0:
        print(epoch, loss.item())
print(w.flatten().tolist(), b.item())
print(w.is_leaf, w.requires_grad, w.grad.abs().sum().item())
