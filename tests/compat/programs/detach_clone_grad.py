"""clone, detach, requires_grad_, is_leaf, .grad accumulation and zeroing."""
import torch

x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
y = x * 2
z = y.detach()
print(y.requires_grad, z.requires_grad, x.is_leaf, y.is_leaf, z.is_leaf)
c = x.clone()
print(c.requires_grad, c.is_leaf)
(c ** 2).sum().backward()
print(x.grad.tolist())
(x ** 3).sum().backward()
print(x.grad.tolist())
x.grad = None
(x.exp()).sum().backward()
print(x.grad.tolist())
w = torch.ones(2)
print(w.requires_grad)
w.requires_grad_()
(w * torch.tensor([3.0, 4.0])).sum().backward()
print(w.grad.tolist(), w.requires_grad)
with torch.no_grad():
    v = x * 10
print(v.requires_grad, torch.is_grad_enabled())
d = x.detach()
d[0] = 100.0
print(x.tolist()[0], d.tolist())
