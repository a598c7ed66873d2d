"""Custom autograd Functions as in the "extending PyTorch" notes: a straight-through sign (forward
sign, backward the clipped identity) used to train a binarized layer, and an exp that saves its
result rather than its input; both gradchecked, with needs_input_grad and mark_non_differentiable."""

import numpy as np
import torch
import torch.nn as nn
from torch.autograd import Function, gradcheck


class SignSTE(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sign(x)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * (x.abs() <= 1).to(grad_output.dtype)


class MyExp(Function):
    @staticmethod
    def forward(ctx, i):
        result = i.exp()
        ctx.save_for_backward(result)
        return result

    @staticmethod
    def backward(ctx, grad_output):
        (result,) = ctx.saved_tensors
        return grad_output * result


class SortWithIndex(Function):
    @staticmethod
    def forward(ctx, x):
        values, idx = torch.sort(x, dim=-1)
        ctx.mark_non_differentiable(idx)
        ctx.save_for_backward(idx)
        return values, idx

    @staticmethod
    def backward(ctx, grad_values, grad_idx):
        (idx,) = ctx.saved_tensors
        # the inverse permutation sends each sorted gradient back to its input position
        return grad_values.gather(-1, torch.argsort(idx, dim=-1))


class BinaryLinear(nn.Linear):
    def forward(self, x):
        return nn.functional.linear(x, SignSTE.apply(self.weight), self.bias)


rng = np.random.default_rng(8)
X = torch.tensor(rng.normal(size=(32, 6)), dtype=torch.float32)
y = (X[:, 0] - X[:, 1] + X[:, 2] > 0).long()
layer = BinaryLinear(6, 2)
with torch.no_grad():
    layer.weight.copy_(torch.tensor(rng.normal(0, 0.5, (2, 6)), dtype=torch.float32))
    layer.bias.zero_()
opt = torch.optim.SGD(layer.parameters(), lr=0.1)
for step in range(20):
    loss = nn.functional.cross_entropy(layer(X), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 5 == 0:
        print(step, f"{loss.item():.4f}", layer.weight.grad.abs().sum().item() > 0)
print(torch.sign(layer.weight.detach()))

x = torch.tensor(rng.normal(size=4), dtype=torch.float64, requires_grad=True)
y = MyExp.apply(x)
y.sum().backward()
print(torch.allclose(x.grad, x.exp()))
print("gradcheck exp:", gradcheck(MyExp.apply, (torch.randn(3, dtype=torch.double, requires_grad=True),)))
v = torch.tensor([[3.0, 1.0, 2.0]], requires_grad=True)
vals, idx = SortWithIndex.apply(v)
print(vals.tolist(), idx, vals.requires_grad, idx.requires_grad)
(vals * torch.tensor([[1.0, 10.0, 100.0]])).sum().backward()
print(v.grad)
