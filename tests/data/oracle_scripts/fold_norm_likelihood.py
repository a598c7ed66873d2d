"""F.unfold/fold with nn.Unfold/Fold, InstanceNorm1d/2d (affine, running statistics, eval),
Softmax2d, Bilinear, GaussianNLLLoss and PoissonNLLLoss (values and gradients);
run with torch and with gradcraft as torch by tests/test_oracle_scripts.py."""

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

rng = np.random.default_rng(6)
img = torch.tensor(rng.normal(size=(2, 3, 5, 6)), requires_grad=True)
for kw in [dict(kernel_size=2), dict(kernel_size=(2, 3), stride=2, padding=1), dict(kernel_size=3, dilation=2)]:
    img.grad = None
    cols = F.unfold(img, **kw)
    (cols * torch.linspace(-1, 1, cols.numel()).reshape(cols.shape)).sum().backward()
    print(kw, tuple(cols.shape), cols[1, :, -1], img.grad[0, 2])
    back = F.fold(cols, (5, 6), **kw)
    print(back[1, 1], F.fold(cols.detach(), (5, 6), **kw).sum())
patches = nn.Unfold(kernel_size=2, stride=2)(torch.arange(32.0).reshape(1, 2, 4, 4))
print(nn.Unfold(kernel_size=2, stride=2), patches, nn.Fold((4, 4), 2, stride=2)(patches))
print(F.unfold(torch.arange(12.0).reshape(1, 3, 4), 2).shape)

for cls, shape in ((nn.InstanceNorm1d, (3, 4, 7)), (nn.InstanceNorm2d, (2, 4, 3, 5))):
    for kwargs in (dict(), dict(affine=True), dict(affine=True, track_running_stats=True, momentum=0.3)):
        m = cls(4, **kwargs)
        if m.affine:
            with torch.no_grad():
                m.weight.copy_(torch.tensor([1.0, 0.5, -1.0, 2.0]))
                m.bias.copy_(torch.tensor([0.1, 0.0, -0.2, 0.3]))
        x = torch.tensor(rng.normal(2.0, 3.0, size=shape), dtype=torch.float32, requires_grad=True)
        y = m(x)
        (y * torch.linspace(0, 1, y.numel()).reshape(y.shape)).sum().backward()
        print(m, y.flatten()[:6], x.grad.flatten()[:6])
        if m.track_running_stats:
            m(x)
            print(m.running_mean, m.running_var, m.num_batches_tracked)
            m.eval()
            print(m(x).flatten()[:5])
print(F.instance_norm(torch.tensor(rng.normal(size=(2, 3, 4)))).sum(-1))

s2 = nn.Softmax2d()
print(s2(torch.tensor(rng.normal(size=(1, 3, 2, 2))))[0, :, 1])
bl = nn.Bilinear(3, 4, 2)
with torch.no_grad():
    bl.weight.copy_(torch.tensor(rng.normal(size=(2, 3, 4))))
    bl.bias.copy_(torch.tensor([0.5, -0.5]))
a = torch.tensor(rng.normal(size=(5, 3)), dtype=torch.float32, requires_grad=True)
b = torch.tensor(rng.normal(size=(5, 4)), dtype=torch.float32)
o = bl(a, b)
o.pow(2).sum().backward()
print(bl, o, a.grad, bl.weight.grad[1], F.bilinear(a[None], b[None], bl.weight).shape)

mu = torch.tensor(rng.normal(size=(6, 2)), requires_grad=True)
target = torch.tensor(rng.normal(size=(6, 2)))
var = torch.tensor(rng.uniform(0.0, 2.0, size=(6, 2)), requires_grad=True)
for red in ("mean", "sum", "none"):
    for full in (False, True):
        mu.grad = var.grad = None
        loss = nn.GaussianNLLLoss(full=full, eps=0.1, reduction=red)(mu, target, var)
        loss.sum().backward()
        print(loss, mu.grad[0], var.grad[:, 0])
print(F.gaussian_nll_loss(mu, target, var[:, 0]), F.gaussian_nll_loss(mu, target, var[:, :1]))
rate = torch.tensor(rng.normal(size=8), requires_grad=True)
counts = torch.tensor(rng.poisson(2.0, size=8).astype(np.float64))
for log_input in (True, False):
    for full in (False, True):
        for red in ("mean", "sum", "none"):
            rate.grad = None
            inp = rate if log_input else rate.exp()
            loss = nn.PoissonNLLLoss(log_input=log_input, full=full, reduction=red)(inp, counts)
            loss.sum().backward()
            print(loss, rate.grad[:3])
