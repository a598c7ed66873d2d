"""The functional convolution and pooling API on small hand-made tensors: conv2d with stride,
padding='same', dilation and groups; conv_transpose1d; max_pool2d with ceil_mode and
return_indices (ties go to the first maximum); avg_pool2d with count_include_pad; the adaptive
pools; and gradients through them."""
import torch
import torch.nn.functional as F

x = torch.arange(1.0, 37.0).reshape(1, 1, 6, 6)
w = torch.tensor([[[[1.0, 0.0, -1.0], [2.0, 0.0, -2.0], [1.0, 0.0, -1.0]]]])
print(F.conv2d(x, w))
print(F.conv2d(x, w, stride=2, padding=1))
print(F.conv2d(x, w, padding="same", dilation=2).sum().item())
two = torch.cat([x, x * 0.5], dim=1)
print(F.conv2d(two, torch.ones(4, 1, 2, 2), groups=2).shape)

values, indices = F.max_pool2d(x, 4, stride=3, padding=1, ceil_mode=True, return_indices=True)
print(values, indices)
print(F.avg_pool2d(x, 3, stride=2, padding=1))
print(F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False))
print(F.adaptive_avg_pool2d(x, (4, 3)))
print(F.adaptive_max_pool2d(x, 4))

flat = torch.tensor([[[1.0, 3.0, 3.0, 2.0, 5.0, 5.0, 0.0]]], requires_grad=True)
F.max_pool1d(flat, 2, stride=1).sum().backward()
print(flat.grad)
with torch.no_grad():
    print(F.avg_pool1d(flat, 3, stride=2, ceil_mode=True))
    print(F.conv_transpose1d(flat, torch.tensor([[[1.0, -1.0, 2.0]]]), stride=2, padding=1, output_padding=1))

xg = x.clone().requires_grad_(True)
loss = F.max_pool2d(F.conv2d(xg, w, padding=1), 2).pow(2).mean() + F.adaptive_avg_pool2d(xg, 1).sum()
loss.backward()
print(xg.grad)
