"""Shuffling and batching by hand: a permutation from NumPy, slicing, index tensors, epochs."""
import numpy as np
import torch
import torch.nn as nn

rng = np.random.default_rng(32)
X = torch.tensor(rng.normal(size=(24, 3)), dtype=torch.float32)
Y = X @ torch.tensor([[1.0], [-1.0], [2.0]]) + 0.5
model = nn.Linear(3, 1)
with torch.no_grad():
    model.weight.fill_(0.0)
    model.bias.fill_(0.0)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(4):
    order = torch.tensor(rng.permutation(24))
    epoch_loss = 0.0
    for start in range(0, 24, 8):
        batch = order[start:start + 8]
        xb, yb = X[batch], Y[batch]
        loss = nn.functional.mse_loss(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        epoch_loss += loss.item() * len(batch)
    print(epoch, round(epoch_loss / 24, 6))
print(model.weight.tolist(), model.bias.tolist())
