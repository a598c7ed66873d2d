"""The in-place methods and operators, on fresh tensors and on views."""
import torch
import torch.nn as nn
import torch.nn.functional as F

x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
x.add_(1).mul_(2)
print(x.tolist())
x -= 1
x /= 2
print(x.tolist())
x.clamp_(min=1.0, max=4.0)
print(x.tolist())
x[0] = 0
x[:, 2] = torch.tensor([9.0, 8.0])
x[1, 0] += 100
print(x.tolist())
row = x[1]
row.zero_()
print(x.tolist())
x.fill_(3.0)
x.T[0].sub_(1)
print(x.tolist())
y = torch.ones(3)
y.copy_(torch.tensor([1, 2, 3]))
y.masked_fill_(y > 2, -1.0)
print(y.tolist(), y.dtype == torch.float32)
z = torch.zeros(4, dtype=torch.long)
z += 5
z //= 2
z %= 2
z *= 3
print(z.tolist())
w = torch.ones(2, 2)
w.data.mul_(7)
w.neg_()
print(w.tolist())
h = torch.tensor([-1.0, 0.5, 2.0])
out = nn.ReLU(inplace=True)(h)
print(out.tolist(), h.tolist(), nn.ReLU(inplace=True), nn.LeakyReLU(0.2, inplace=True))
g = torch.tensor([-2.0, 3.0])
F.leaky_relu(g, 0.5, inplace=True)
print(g.tolist())
