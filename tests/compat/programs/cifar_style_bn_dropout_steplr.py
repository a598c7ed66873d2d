"""An image classifier as in the CIFAR tutorial, shrunk: two Conv2d + BatchNorm2d + ReLU + MaxPool2d
blocks, Dropout before the head, a DataLoader over a TensorDataset (fixed order), SGD with momentum and
weight decay under a StepLR schedule; running BatchNorm statistics and eval-mode accuracy printed."""

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

rng = np.random.default_rng(101)
n = 48
images = rng.normal(0, 0.5, size=(n, 3, 8, 8))
labels = rng.integers(0, 3, size=n)
for i, c in enumerate(labels):
    images[i, c, 2:6, 2:6] += 1.0
train_set = TensorDataset(torch.tensor(images, dtype=torch.float32), torch.tensor(labels))
loader = DataLoader(train_set, batch_size=16, shuffle=False)


class Net(nn.Module):
    def __init__(self, dropout=0.25):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 6, 3, padding=1),
            nn.BatchNorm2d(6),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2, 2),
            nn.Conv2d(6, 8, 3, padding=1),
            nn.BatchNorm2d(8),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2, 2),
        )
        self.dropout = nn.Dropout(dropout)
        self.fc = nn.Linear(8 * 2 * 2, 3)

    def forward(self, x):
        x = self.features(x)
        x = torch.flatten(x, 1)
        return self.fc(self.dropout(x))


# a dropout mask is random (and drawn differently by each library): fit without it, check it after
net = Net(dropout=0.0)
with torch.no_grad():
    for p in net.parameters():
        p.copy_(torch.tensor(rng.normal(0, 0.3, size=tuple(p.shape)), dtype=torch.float32))
print(sum(p.numel() for p in net.parameters() if p.requires_grad), "trainable parameters")
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
for epoch in range(4):
    running_loss = 0.0
    for i, (inputs, targets) in enumerate(loader, 0):
        optimizer.zero_grad()
        outputs = net(inputs)
        loss = criterion(outputs, targets)
        loss.backward()
        optimizer.step()
        running_loss += loss.item()
    scheduler.step()
    print(f"[{epoch + 1}] loss: {running_loss / len(loader):.4f} lr {scheduler.get_last_lr()[0]:.4f}")

bn = net.features[1]
print(bn.running_mean, bn.running_var.sum().item(), bn.num_batches_tracked.item())
net.eval()
correct = total = 0
with torch.no_grad():
    for inputs, targets in loader:
        _, predicted = torch.max(net(inputs).data, 1)
        total += targets.size(0)
        correct += (predicted == targets).sum().item()
print(f"Accuracy of the network: {100 * correct // total} %")

drop = nn.Dropout(p=0.25)
x = torch.ones(200, 10)
out = drop(x)
kept = out != 0
print(torch.allclose(out[kept], torch.full_like(out[kept], 1 / 0.75)), 0.6 < kept.float().mean().item() < 0.9)
drop.eval()
print(torch.equal(drop(x), x))
