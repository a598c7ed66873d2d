"""A small convolutional classifier on synthetic 8x8 images (vertical or horizontal bars plus noise):
Conv2d, ReLU, MaxPool2d, a second conv block with padding, AdaptiveAvgPool2d, Flatten, Linear,
trained with SGD and momentum; loss, accuracy and the feature-map shapes printed."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

rng = np.random.default_rng(11)
images, labels = [], []
for i in range(32):
    img = rng.normal(0, 0.3, size=(1, 8, 8))
    pos = rng.integers(1, 7)
    if i % 2 == 0:
        img[0, :, pos] += 1.5
    else:
        img[0, pos, :] += 1.5
    images.append(img)
    labels.append(i % 2)
X = torch.tensor(np.stack(images), dtype=torch.float32)
y = torch.tensor(labels)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, kernel_size=3)
        self.pool = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(4, 6, 3, padding=1)
        self.gap = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(6, 2)

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))
        x = F.relu(self.conv2(x))
        return self.fc(torch.flatten(self.gap(x), 1))


model = Net()
print(model)
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.tensor(rng.normal(0, 0.4, size=tuple(p.shape)), dtype=torch.float32))
print(model.conv1(X).shape, model.pool(model.conv1(X)).shape)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
for epoch in range(12):
    opt.zero_grad()
    out = model(X)
    loss = F.cross_entropy(out, y)
    loss.backward()
    opt.step()
    if epoch % 3 == 0:
        acc = (out.argmax(dim=1) == y).float().mean().item()
        print(f"epoch {epoch} loss {loss.item():.4f} acc {acc:.3f}")
model.eval()
with torch.no_grad():
    pred = model(X).argmax(1)
print("correct", int((pred == y).sum()), "of", len(y))
print("conv1 grad norm", round(model.conv1.weight.grad.norm().item(), 4))
