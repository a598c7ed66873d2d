"""Two backward passes through one graph need retain_graph=True; gradients accumulate."""
import torch

x = torch.tensor([0.5, 1.5], requires_grad=True)
y = (x.sin() * x).sum()
y.backward(retain_graph=True)
print(x.grad.tolist())
y.backward()
print(x.grad.tolist())
try:
    y.backward()
    print("third backward ran")
except RuntimeError:
    print("RuntimeError: graph freed")
z = (x ** 2).sum()
z.backward()
print(x.grad.tolist())
