"""Linear regression fed by a DataLoader over a TensorDataset, the losses logged with f-strings
(the PyTorch tutorials' training loop)."""
import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

rng = np.random.default_rng(0)
features = torch.tensor(rng.normal(size=(64, 3)), dtype=torch.float32)
true_w = torch.tensor([[2.0], [-3.4], [1.5]])
labels = features @ true_w + 4.2 + 0.01 * torch.tensor(rng.normal(size=(64, 1)), dtype=torch.float32)

dataset = TensorDataset(features, labels)
loader = DataLoader(dataset, batch_size=10)  # the last batch holds 4
print(f"{len(dataset)} samples, {len(loader)} batches per epoch")

net = nn.Sequential(nn.Linear(3, 1))
with torch.no_grad():
    net[0].weight.fill_(0.0)
    net[0].bias.fill_(0.0)
loss_fn = nn.MSELoss()
trainer = torch.optim.SGD(net.parameters(), lr=0.05)

for epoch in range(5):
    for X, y in loader:
        loss = loss_fn(net(X), y)
        trainer.zero_grad()
        loss.backward()
        trainer.step()
    with torch.no_grad():
        full = loss_fn(net(features), labels)
    print(f"epoch {epoch + 1}, loss {full:f}")

w = net[0].weight.data
b = net[0].bias.data
print(f"error in estimating w: {(true_w.reshape(w.shape) - w).abs().max():.4f}")
print(f"error in estimating b: {(4.2 - b).abs().item():.4f}")
xb, yb = next(iter(loader))
print(xb.shape, yb.shape, xb.dtype == torch.float32)
