"""Pooling variants: adaptive average and max pooling to sizes that do not divide the input
(1-d and 2-d, None keeping a dimension), max pooling with stride and padding, average pooling with
count_include_pad and ceil_mode, global pooling by mean/amax, and a head that accepts any input
size because of AdaptiveAvgPool2d; gradients through max pooling."""

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

rng = np.random.default_rng(81)
x = torch.tensor(rng.normal(size=(2, 3, 7, 5)), dtype=torch.float32)
print(F.adaptive_avg_pool2d(x, (3, 2))[0, 0])
print(F.adaptive_max_pool2d(x, 2)[1, 2])
print(nn.AdaptiveAvgPool2d((None, 2))(x).shape, nn.AdaptiveMaxPool2d((4, None))(x).shape)
seq = torch.tensor(rng.normal(size=(2, 4, 10)), dtype=torch.float32)
print(F.adaptive_avg_pool1d(seq, 3)[0], nn.AdaptiveMaxPool1d(4)(seq).shape)
print(F.max_pool1d(seq, kernel_size=3, stride=2, padding=1)[1, 0])
print(F.avg_pool1d(seq, 4, stride=3)[0, 1])

print(F.max_pool2d(x, kernel_size=3, stride=2, padding=1).shape, F.max_pool2d(x, 2)[0, 1])
print(F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False)[0, 0])
print(F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=True)[0, 0])
print(nn.AvgPool2d(2, ceil_mode=True)(x).shape, nn.MaxPool2d(2, ceil_mode=True)(x).shape)
print(torch.allclose(F.adaptive_avg_pool2d(x, 1).flatten(1), x.mean(dim=(2, 3))))
print(torch.equal(F.adaptive_max_pool2d(x, 1).flatten(1), x.amax(dim=(2, 3))))


class AnySizeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d((2, 2))
        self.fc = nn.Linear(16, 2)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(F.relu(self.conv(x))), 1))


net = AnySizeNet()
with torch.no_grad():
    for p in net.parameters():
        p.copy_(torch.tensor(rng.normal(0, 0.4, size=tuple(p.shape)), dtype=torch.float32))
for h, w in ((7, 5), (9, 9), (4, 6)):
    img = torch.tensor(rng.normal(size=(1, 3, h, w)), dtype=torch.float32)
    print((h, w), net(img).detach())
xr = x.clone().requires_grad_(True)
F.max_pool2d(xr, 2).sum().backward()
print(xr.grad.sum().item(), xr.grad[0, 0])
