"""Shuffled epochs: each epoch reads every sample once in some order. The order is the generator's,
so only what does not depend on it is printed: per-epoch coverage, batch count, sums, and full-batch
training (where the order cannot matter)."""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
X = torch.arange(30, dtype=torch.float32).reshape(15, 2) / 10
Y = X.sum(1, keepdim=True) * 0.5
dataset = TensorDataset(X, Y, torch.arange(15))
loader = DataLoader(dataset, batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(1))
orders = []
for epoch in range(3):
    seen, total, batches = [], 0.0, 0
    for xb, yb, idx in loader:
        seen += idx.tolist()
        total += xb.sum().item()
        batches += 1
    orders.append(seen)
    print(epoch, sorted(seen) == list(range(15)), batches, f"{total:.3f}")
print(len(loader), orders[0] != orders[1] or orders[1] != orders[2])

model = nn.Linear(2, 1)
with torch.no_grad():
    model.weight.zero_()
    model.bias.zero_()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
full_batch = DataLoader(dataset, batch_size=len(dataset), shuffle=True)
for epoch in range(4):
    for xb, yb, _ in full_batch:
        loss = nn.functional.mse_loss(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"epoch {epoch}: loss {loss:.6f}")
print([round(v, 5) for v in model.weight.flatten().tolist()], round(model.bias.item(), 5))
