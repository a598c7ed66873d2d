"""A 3-class classifier with CrossEntropyLoss, Adam and a StepLR schedule; accuracy per epoch."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

rng = np.random.default_rng(1)
centers = np.array([[2.0, 0.0], [-1.0, 1.7], [-1.0, -1.7]])
labels = rng.integers(0, 3, size=90)
points = centers[labels] + rng.normal(0, 0.8, size=(90, 2))
X = torch.tensor(points, dtype=torch.float32)
Y = torch.tensor(labels)


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden = nn.Linear(2, 8)
        self.out = nn.Linear(8, 3)

    def forward(self, x):
        return self.out(F.relu(self.hidden(x)))


model = Classifier()
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.tensor(rng.normal(0, 0.4, size=tuple(p.shape)), dtype=torch.float32))
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)

for epoch in range(8):
    for start in range(0, 90, 30):
        xb, yb = X[start:start + 30], Y[start:start + 30]
        optimizer.zero_grad()
        loss = criterion(model(xb), yb)
        loss.backward()
        optimizer.step()
    scheduler.step()
    with torch.no_grad():
        logits = model(X)
        accuracy = (logits.argmax(dim=1) == Y).float().mean().item()
    print(f"epoch {epoch} lr {scheduler.get_last_lr()[0]:.5f} loss {loss.item():.5f} acc {accuracy:.4f}")
