"""What PyTorch refuses, and that gradcraft refuses it too (the types of the errors)."""
import torch

w = torch.ones(3, requires_grad=True)
for attempt in (lambda: w.add_(1), lambda: w.mul_(2), lambda: w.__setitem__(0, 5.0)):
    try:
        attempt()
        print("allowed")
    except RuntimeError:
        print("RuntimeError")
with torch.no_grad():
    w.add_(1)
print(w.tolist(), w.is_leaf)
ints = torch.arange(3)
try:
    ints += 0.5
    print("allowed")
except RuntimeError:
    print("RuntimeError")
y = w.exp()
y.mul_(2)
try:
    y.sum().backward()
    print("backward ran")
except RuntimeError:
    print("RuntimeError at backward")
h = w * 2
h.add_(1)
(h * h).sum().backward()
print(w.grad.tolist())
try:
    torch.zeros(2, 3)[5]
except IndexError:
    print("IndexError")
