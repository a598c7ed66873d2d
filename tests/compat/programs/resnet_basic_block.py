"""A small ResNet: BasicBlock with two 3x3 convolutions, BatchNorm2d, an identity shortcut or a
1x1 strided projection when the shape changes, `out += identity`, a stem, global average pooling,
kaiming_normal_-style fan-out scaling applied to NumPy draws; trained a few steps, then the block's
output shapes and a no-grad eval pass."""

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, in_planes, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, kernel_size=3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, planes, kernel_size=1, stride=stride, bias=False), nn.BatchNorm2d(planes)
            )

    def forward(self, x):
        identity = self.shortcut(x)
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += identity
        return F.relu(out)


class ResNet(nn.Module):
    def __init__(self, num_classes=3):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(2, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4), nn.ReLU())
        self.layer1 = BasicBlock(4, 4)
        self.layer2 = BasicBlock(4, 8, stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(8, num_classes)

    def forward(self, x):
        x = self.layer2(self.layer1(self.stem(x)))
        return self.fc(torch.flatten(self.avgpool(x), 1))


rng = np.random.default_rng(2)
model = ResNet()
with torch.no_grad():
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            fan_out = m.out_channels * m.kernel_size[0] * m.kernel_size[1]
            m.weight.copy_(torch.tensor(rng.normal(0, math.sqrt(2.0 / fan_out), tuple(m.weight.shape))))
        elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
            nn.init.constant_(m.weight, 1)
            nn.init.constant_(m.bias, 0)
        elif isinstance(m, nn.Linear):
            m.weight.copy_(torch.tensor(rng.normal(0, 0.1, (3, 8))))
            nn.init.zeros_(m.bias)
print(sum(p.numel() for p in model.parameters()), len(list(model.modules())))
print(isinstance(model.layer1.shortcut, nn.Sequential), len(model.layer1.shortcut), len(model.layer2.shortcut))
x = torch.tensor(rng.normal(size=(6, 2, 6, 6)), dtype=torch.float32)
y = torch.tensor([0, 1, 2, 0, 1, 2])
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)
for step in range(6):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    print(f"step {step} loss {loss.item():.4f}")
print(model.layer1(model.stem(x)).shape, model.layer2(model.layer1(model.stem(x))).shape)
model.eval()
with torch.no_grad():
    print(model(x).softmax(dim=1)[:2])
print(model.layer2.shortcut[1].running_var)
