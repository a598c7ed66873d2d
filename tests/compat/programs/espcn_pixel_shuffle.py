"""An ESPCN-style super-resolution network: convolutions to r^2 channels per output channel, then
PixelShuffle(r); low-resolution inputs made by bicubic F.interpolate of the targets, a bilinear
upsampling baseline, MSE training with Adam and PSNR printed; PixelUnshuffle inverts the shuffle."""

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

rng = np.random.default_rng(8)
scale = 2
grid = np.linspace(0, 1, 12)
targets = np.stack(
    [np.sin(2 * np.pi * (a * grid[:, None] + b * grid[None, :])) for a, b in rng.uniform(0.5, 1.5, (6, 2))]
)
high = torch.tensor(targets[:, None], dtype=torch.float32)
low = F.interpolate(high, scale_factor=1 / scale, mode="bicubic", align_corners=False)
print(tuple(low.shape), low[0, 0, 0])


class ESPCN(nn.Module):
    def __init__(self, r):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, 5, padding=2), nn.Tanh(), nn.Conv2d(8, 6, 3, padding=1), nn.Tanh()
        )
        self.to_subpixels = nn.Conv2d(6, r * r, 3, padding=1)
        self.shuffle = nn.PixelShuffle(r)

    def forward(self, x):
        return self.shuffle(self.to_subpixels(self.features(x)))


def psnr(a, b):
    return 10 * math.log10(4.0 / F.mse_loss(a, b).item())


model = ESPCN(scale)
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.tensor(rng.normal(0, 0.3, size=tuple(p.shape)), dtype=torch.float32))
baseline = F.interpolate(low, scale_factor=scale, mode="bilinear", align_corners=False)
print(model.shuffle, f"bilinear PSNR {psnr(baseline, high):.4f}")
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
for step in range(8):
    loss = F.mse_loss(model(low), high)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step % 2 == 0:
        print(step, f"loss {loss.item():.6f}")
with torch.no_grad():
    sr = model(low)
    print(tuple(sr.shape), f"ESPCN PSNR {psnr(sr, high):.4f}")
    sub = model.to_subpixels(model.features(low))
    print(torch.equal(nn.PixelUnshuffle(scale)(model.shuffle(sub)), sub), sr[0, 0, :2, :4])
