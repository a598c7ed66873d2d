"""The remaining activations (modules and F.*), F.pad's modes with the padding modules, and
CosineSimilarity (values, gradients, printouts);
run with torch and with gradcraft as torch by tests/test_oracle_scripts.py."""

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

rng = np.random.default_rng(4)
x0 = np.concatenate([rng.normal(scale=3.0, size=14), [0.0, 0.5, -0.5, 3.0, -3.0, 6.0]]).reshape(4, 5)
modules = [
    nn.ReLU6(),
    nn.Hardtanh(),
    nn.Hardtanh(-2.0, 2.5),
    nn.Hardsigmoid(),
    nn.Hardswish(),
    nn.Mish(),
    nn.SELU(),
    nn.CELU(0.7),
    nn.Softsign(),
    nn.Softmin(dim=1),
    nn.Tanhshrink(),
    nn.Softshrink(0.3),
    nn.Hardshrink(),
    nn.Threshold(0.1, 20.0),
]
for m in modules:
    x = torch.tensor(x0 + 0.01, requires_grad=True)
    y = m(x)
    (y * torch.linspace(-1, 1, 20).reshape(4, 5)).sum().backward()
    print(m, y[1], x.grad[2])
x = torch.tensor(x0)
print(F.relu6(x)[3], F.hardtanh(x, -1.5, 1.5)[0], F.selu(x)[1], F.celu(x, 2.0)[2], F.mish(x)[0], F.softmin(x, 0)[:, 0])
print(F.hardswish(x)[3], F.hardsigmoid(x)[3], F.softshrink(x, 1.0)[0], F.hardshrink(x, 1.0)[0])
print(F.threshold(x, 0.5, -1.0)[0])
y = x.clone()
F.relu6(y, inplace=True)
print(y[0], nn.Hardtanh(inplace=True), nn.ReLU6(True))
img = torch.tensor(rng.normal(size=(2, 2, 3, 4)), requires_grad=True)
line = torch.tensor(rng.normal(size=(2, 3, 5)), requires_grad=True)
for m, inp in [
    (nn.ZeroPad2d((1, 2, 0, 1)), img),
    (nn.ZeroPad1d(2), line),
    (nn.ConstantPad2d(1, 3.5), img),
    (nn.ConstantPad1d((1, 2), 0.5), line),
    (nn.ReflectionPad2d(2), img),
    (nn.ReflectionPad1d((3, 1)), line),
    (nn.ReplicationPad2d((1, 0, 2, 1)), img),
    (nn.ReplicationPad1d(2), line),
    (nn.CircularPad2d(1), img),
    (nn.CircularPad1d((2, 1)), line),
]:
    inp.grad = None
    out = m(inp)
    (out * torch.linspace(0, 1, out.numel()).reshape(out.shape)).sum().backward()
    print(m, tuple(out.shape), out[1, 0], inp.grad[0, 1])
seq = torch.tensor(rng.normal(size=(1, 2, 5)))
print(F.pad(seq, (2, 1), mode="reflect"), F.pad(seq, (1, 3), mode="replicate"), F.pad(seq, (2, 2), mode="circular"))
print(F.pad(seq, (1, 1), value=-1.0), F.pad(img.detach(), (1, 1, 2, 0), mode="reflect")[0, 0])
a, b = torch.tensor(rng.normal(size=(3, 4)), requires_grad=True), torch.tensor(rng.normal(size=(3, 4)))
cs = nn.CosineSimilarity(dim=1)
s = cs(a, b)
s.sum().backward()
print(cs, s, a.grad, nn.CosineSimilarity(dim=0, eps=1e-6)(a, b))
