"""A tiny U-Net for per-pixel segmentation: encoder convs with MaxPool2d, a bottleneck, a decoder
upsampling with ConvTranspose2d and concatenating the encoder feature map (torch.cat on the channel
dim), a 1x1 conv to logits, BCEWithLogitsLoss with pos_weight, and the Dice score."""

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def double_conv(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU(), nn.Conv2d(cout, cout, 3, padding=1), nn.ReLU())


class UNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.down1 = double_conv(1, 4)
        self.pool = nn.MaxPool2d(2)
        self.bottleneck = double_conv(4, 8)
        self.up = nn.ConvTranspose2d(8, 4, kernel_size=2, stride=2)
        self.dec = double_conv(8, 4)
        self.out = nn.Conv2d(4, 1, kernel_size=1)

    def forward(self, x):
        skip = self.down1(x)
        x = self.bottleneck(self.pool(skip))
        x = self.up(x)
        x = torch.cat([x, skip], dim=1)
        return self.out(self.dec(x))


rng = np.random.default_rng(91)
images = np.zeros((4, 1, 8, 8))
masks = np.zeros((4, 1, 8, 8))
for i in range(4):
    r, c = rng.integers(0, 5, size=2)
    masks[i, 0, r : r + 3, c : c + 3] = 1
    images[i] = masks[i] * 1.0 + rng.normal(0, 0.3, size=(1, 8, 8))
images = torch.tensor(images, dtype=torch.float32)
masks = torch.tensor(masks, dtype=torch.float32)

model = UNet()
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.tensor(rng.normal(0, 0.3, size=tuple(p.shape)), dtype=torch.float32))
pos_weight = (masks.numel() - masks.sum()) / masks.sum()
criterion = nn.BCEWithLogitsLoss(pos_weight=pos_weight)
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
print(model.up(torch.zeros(1, 8, 4, 4)).shape, f"{pos_weight.item():.4f}")


def dice(logits, target, eps=1e-6):
    pred = (torch.sigmoid(logits) > 0.5).float()
    inter = (pred * target).sum(dim=(1, 2, 3))
    return ((2 * inter + eps) / (pred.sum(dim=(1, 2, 3)) + target.sum(dim=(1, 2, 3)) + eps)).mean()


for step in range(12):
    logits = model(images)
    loss = criterion(logits, masks)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step % 4 == 0:
        print(f"step {step} loss {loss.item():.4f} dice {dice(logits.detach(), masks).item():.4f}")
with torch.no_grad():
    logits = model(images)
print(logits.shape, f"{dice(logits, masks).item():.4f}", F.sigmoid(logits)[0, 0, 3])
