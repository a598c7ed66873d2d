"""A custom Dataset (NumPy samples, an integer label each), batched with drop_last, and a small
classifier trained over it; accuracy printed with format specs."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset


class Blobs(Dataset):
    """Three Gaussian blobs in 2-D; sample i is (point, label)."""

    def __init__(self, n_per_class, seed):
        rng = np.random.default_rng(seed)
        centers = np.array([[0.0, 2.0], [2.0, -1.0], [-2.0, -1.0]])
        self.points = np.concatenate([c + 0.6 * rng.normal(size=(n_per_class, 2)) for c in centers])
        self.labels = np.repeat(np.arange(3), n_per_class)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, idx):
        return self.points[idx].astype(np.float32), int(self.labels[idx])


train = Blobs(20, seed=1)
test = Blobs(10, seed=2)
train_loader = DataLoader(train, batch_size=16, drop_last=True)
test_loader = DataLoader(test, batch_size=32)
print("batches:", len(train_loader), len(test_loader))

model = nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Linear(16, 3))
rng = np.random.default_rng(5)
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.tensor(rng.normal(0, 0.5, size=tuple(p.shape)), dtype=torch.float32))
optimizer = torch.optim.Adam(model.parameters(), lr=0.03)


def evaluate(loader):
    model.eval()
    correct, total, loss_sum = 0, 0, 0.0
    with torch.no_grad():
        for x, y in loader:
            logits = model(x)
            loss_sum += F.cross_entropy(logits, y, reduction="sum").item()
            correct += (logits.argmax(1) == y).sum().item()
            total += y.size(0)
    return loss_sum / total, correct / total


for epoch in range(6):
    model.train()
    for batch, (x, y) in enumerate(train_loader):
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if batch == 0:
            print(f"epoch {epoch} first batch: x {tuple(x.shape)}, y {y.dtype == torch.int64}, loss {loss:>7.4f}")
    test_loss, accuracy = evaluate(test_loader)
    print(f"Test Error: Accuracy: {100 * accuracy:>0.1f}%, Avg loss: {test_loss:>8.5f}")
