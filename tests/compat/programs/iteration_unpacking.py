"""Python's protocols on tensors: for loops, unpacking, zip, enumerate, list, len, `in` on lists."""
import torch

t = torch.arange(12).reshape(4, 3)
for row in t:
    print(row.tolist(), int(row.sum()))
a, b, c, d = t
print(a.tolist(), d.tolist())
print([int(v) for v in t[1]])
for i, (x, y) in enumerate(zip(t[:, 0], t[:, 1])):
    print(i, x.item(), y.item())
print(len(t), len(list(t)), t.size(0), t.shape[1], t.dim(), t.numel())
total = 0
for value in t.flatten():
    total += value
print(int(total))
first, *rest = torch.tensor([1.5, 2.5, 3.5])
print(float(first), [float(r) for r in rest])
try:
    t[10]
except IndexError:
    print("index error caught")
print(max(torch.tensor([3, 9, 2])).item(), sorted(torch.tensor([3, 1, 2]).tolist()))
