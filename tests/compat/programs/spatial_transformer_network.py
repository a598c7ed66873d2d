"""The spatial transformer network tutorial at a tiny size: a localisation net predicts an affine theta
(fc_loc starts at the identity), F.affine_grid + F.grid_sample warp the input, a small classifier reads
the warped image; trained with SGD on synthetic 12x12 images of shifted, rotated bars. Afterwards the
learnt transforms are read back: rotation angle (atan2), scale (linalg.det), the inverse warp
(linalg.inv of the 3x3 homogeneous matrix), and a round trip through the inverse with nearest
sampling and border padding."""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

rng = np.random.default_rng(5)
images, labels = [], []
for i in range(16):
    img = rng.normal(0, 0.2, size=(1, 12, 12))
    pos = int(rng.integers(3, 9))
    if i % 2 == 0:
        img[0, 2:10, pos] += 1.5
    else:
        img[0, pos, 2:10] += 1.5
    images.append(img)
    labels.append(i % 2)
X = torch.tensor(np.stack(images), dtype=torch.float32)
y = torch.tensor(labels)
# rotate every image a little with a known affine grid (the distortion the transformer should undo)
angles = torch.tensor(rng.uniform(-0.4, 0.4, size=16), dtype=torch.float32)
rot = torch.stack(
    [torch.cos(angles), -torch.sin(angles), torch.zeros(16), torch.sin(angles), torch.cos(angles), torch.zeros(16)], 1
).view(-1, 2, 3)
X = F.grid_sample(X, F.affine_grid(rot, list(X.shape), align_corners=False), align_corners=False)
print("recovered angles", torch.atan2(rot[:, 1, 0], rot[:, 0, 0])[:4])


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.localization = nn.Sequential(
            nn.Conv2d(1, 4, kernel_size=3), nn.MaxPool2d(2, stride=2), nn.ReLU(True),
        )
        self.fc_loc = nn.Sequential(nn.Linear(4 * 5 * 5, 8), nn.ReLU(True), nn.Linear(8, 3 * 2))
        self.conv = nn.Conv2d(1, 4, kernel_size=3)
        self.fc = nn.Linear(4 * 5 * 5, 2)

    def stn(self, x):
        xs = self.localization(x).view(-1, 4 * 5 * 5)
        theta = self.fc_loc(xs).view(-1, 2, 3)
        grid = F.affine_grid(theta, x.size(), align_corners=False)
        return F.grid_sample(x, grid, align_corners=False), theta

    def forward(self, x):
        x, theta = self.stn(x)
        x = F.max_pool2d(F.relu(self.conv(x)), 2)
        return F.log_softmax(self.fc(x.view(-1, 4 * 5 * 5)), dim=1), theta


model = Net()
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.tensor(rng.normal(0, 0.3, size=tuple(p.shape)), dtype=torch.float32))
    # the tutorial's identity start for the last localisation layer
    model.fc_loc[2].weight.zero_()
    model.fc_loc[2].bias.copy_(torch.tensor([1, 0, 0, 0, 1, 0], dtype=torch.float))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
for epoch in range(10):
    opt.zero_grad()
    out, theta = model(X)
    loss = F.nll_loss(out, y)
    loss.backward()
    opt.step()
    if epoch % 3 == 0:
        print(f"epoch {epoch} loss {loss.item():.4f} theta grad {model.fc_loc[2].bias.grad.abs().sum().item():.5f}")

with torch.no_grad():
    out, theta = model(X)
    print("correct", int((out.argmax(1) == y).sum()), "of", len(y))
    angle = torch.atan2(theta[:, 1, 0], theta[:, 0, 0])
    scale = torch.linalg.det(theta[:, :, :2])
    print("angles (deg)", (angle * 180 / math.pi)[:4])
    print("scales", scale[:4], "hypot", torch.hypot(theta[:, 0, 0], theta[:, 1, 0])[:4])
    full = torch.cat([theta, torch.tensor([[[0.0, 0.0, 1.0]]]).expand(16, 1, 3)], dim=1)
    back = torch.linalg.inv(full)[:, :2, :]
    warped = F.grid_sample(X, F.affine_grid(theta, list(X.shape), align_corners=True), align_corners=True)
    restored = F.grid_sample(
        warped, F.affine_grid(back, list(X.shape), align_corners=True), mode="nearest", padding_mode="border",
        align_corners=True,
    )
    print("round trip error", (restored - X)[:, :, 3:9, 3:9].abs().mean().item())
    sign, logabs = torch.linalg.slogdet(full)
    print("log|det|", logabs[:4], "signs", sign[:4])
