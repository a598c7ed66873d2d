"""MobileNetV3-style blocks as torchvision writes them, shrunk: `_make_divisible`, a
Conv2dNormActivation-like Sequential (Conv2d, BatchNorm2d, Hardswish/ReLU), a depthwise conv
(groups=channels), SqueezeExcitation with `F.adaptive_avg_pool2d`, ReLU and `nn.Hardsigmoid`, the
inverted residual's `use_res_connect`, a classifier with Hardswish and Dropout, and a head comparing
ReLU6, Mish, SELU, CELU, Softsign, Hardtanh and LogSigmoid on the features; a few SGD steps with
label-smoothed cross entropy. Weights and images from NumPy."""

from functools import partial

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn


def _make_divisible(v, divisor, min_value=None):
    if min_value is None:
        min_value = divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    # Make sure that round down does not go down by more than 10%.
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


class SqueezeExcitation(nn.Module):
    def __init__(self, input_channels, squeeze_channels, activation=nn.ReLU, scale_activation=nn.Hardsigmoid):
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(input_channels, squeeze_channels, 1)
        self.fc2 = nn.Conv2d(squeeze_channels, input_channels, 1)
        self.activation = activation()
        self.scale_activation = scale_activation()

    def _scale(self, input: Tensor) -> Tensor:
        scale = self.avgpool(input)
        scale = self.fc1(scale)
        scale = self.activation(scale)
        scale = self.fc2(scale)
        return self.scale_activation(scale)

    def forward(self, input: Tensor) -> Tensor:
        scale = self._scale(input)
        return scale * input


def conv_norm_act(in_channels, out_channels, kernel_size=3, stride=1, groups=1, norm_layer=None, activation_layer=nn.ReLU):
    padding = (kernel_size - 1) // 2
    layers = [nn.Conv2d(in_channels, out_channels, kernel_size, stride, padding, groups=groups, bias=norm_layer is None)]
    if norm_layer is not None:
        layers.append(norm_layer(out_channels))
    if activation_layer is not None:
        layers.append(activation_layer(inplace=True))
    return nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    def __init__(self, input_channels, expanded_channels, out_channels, kernel, stride, use_se, use_hs, norm_layer):
        super().__init__()
        self.use_res_connect = stride == 1 and input_channels == out_channels
        layers = []
        activation_layer = nn.Hardswish if use_hs else nn.ReLU
        if expanded_channels != input_channels:
            layers.append(conv_norm_act(input_channels, expanded_channels, 1, norm_layer=norm_layer, activation_layer=activation_layer))
        layers.append(
            conv_norm_act(expanded_channels, expanded_channels, kernel, stride, groups=expanded_channels, norm_layer=norm_layer, activation_layer=activation_layer)
        )
        if use_se:
            squeeze_channels = _make_divisible(expanded_channels // 4, 8)
            layers.append(SqueezeExcitation(expanded_channels, squeeze_channels, scale_activation=nn.Hardsigmoid))
        layers.append(conv_norm_act(expanded_channels, out_channels, 1, norm_layer=norm_layer, activation_layer=None))
        self.block = nn.Sequential(*layers)
        self.out_channels = out_channels

    def forward(self, input: Tensor) -> Tensor:
        result = self.block(input)
        if self.use_res_connect:
            result += input
        return result


class TinyMobileNetV3(nn.Module):
    def __init__(self, num_classes=4):
        super().__init__()
        norm_layer = partial(nn.BatchNorm2d, eps=0.001, momentum=0.01)
        self.features = nn.Sequential(
            conv_norm_act(3, 8, 3, stride=2, norm_layer=norm_layer, activation_layer=nn.Hardswish),
            InvertedResidual(8, 8, 8, 3, 1, True, False, norm_layer),
            InvertedResidual(8, 24, 12, 3, 2, False, True, norm_layer),
            InvertedResidual(12, 36, 12, 5, 1, True, True, norm_layer),
        )
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(
            nn.Linear(12, 16), nn.Hardswish(inplace=True), nn.Dropout(p=0.0, inplace=True), nn.Linear(16, num_classes)
        )

    def forward(self, x: Tensor) -> Tensor:
        x = self.features(x)
        x = self.avgpool(x)
        x = torch.flatten(x, 1)
        return self.classifier(x)


rng = np.random.default_rng(31)
model = TinyMobileNetV3()
with torch.no_grad():
    for name, p in model.named_parameters():
        p.copy_(torch.tensor(rng.normal(0.0 if p.dim() > 1 else 0.1, 0.4, size=tuple(p.shape)), dtype=torch.float32))
print(model.features[1].block[1], _make_divisible(36 // 4, 8), _make_divisible(20, 8))
print(sum(p.numel() for p in model.parameters()), [m.use_res_connect for m in model.features[1:]])

images = torch.tensor(rng.normal(size=(8, 3, 16, 16)), dtype=torch.float32)
labels = torch.tensor(rng.integers(0, 4, size=8))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-5)
criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
for step in range(3):
    optimizer.zero_grad()
    loss = criterion(model(images), labels)
    loss.backward()
    optimizer.step()
    print(f"step {step}: loss {loss.item():.4f}")

model.eval()
with torch.no_grad():
    feats = torch.flatten(model.avgpool(model.features(images)), 1)
    print("acc", model.classifier(feats).argmax(dim=1).eq(labels).sum().item())
heads = [nn.ReLU6(), nn.Mish(), nn.SELU(), nn.CELU(0.5), nn.Softsign(), nn.Hardtanh(-0.5, 0.5), nn.LogSigmoid(),
         nn.Hardswish(), nn.Hardsigmoid(), nn.Softmin(dim=1), nn.Tanhshrink(), nn.Softshrink(0.3), nn.Threshold(0.1, -1.0)]
x = (feats * 4).requires_grad_()
for act in heads:
    y = act(x)
    (g,) = torch.autograd.grad(y.sum(), x)
    print(act, round(y.sum().item(), 4), round(g.abs().sum().item(), 4))
print(F.relu6(torch.tensor([-1.0, 3.0, 7.0])), F.hardswish(torch.tensor([-4.0, -1.0, 0.5, 4.0])))
print(F.logsigmoid(torch.tensor([-30.0, 0.0, 30.0])), torch.log1p(torch.tensor([1e-7, 1.0])), torch.expm1(torch.tensor([1e-7, 1.0])))
