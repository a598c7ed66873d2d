"""Logistic regression with BCEWithLogitsLoss and SGD with momentum."""
import numpy as np
import torch
import torch.nn as nn

rng = np.random.default_rng(9)
X = torch.tensor(rng.normal(size=(100, 2)), dtype=torch.float32)
y = ((X[:, 0] + 0.5 * X[:, 1]) > 0).float().unsqueeze(1)

model = nn.Linear(2, 1)
with torch.no_grad():
    model.weight.zero_()
    model.bias.zero_()
loss_fn = nn.BCEWithLogitsLoss()
opt = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
for step in range(25):
    opt.zero_grad()
    loss = loss_fn(model(X), y)
    loss.backward()
    opt.step()
    if step % 6 == 0:
        print(step, f"{loss.item():.6f}")
pred = (torch.sigmoid(model(X)) > 0.5).float()
print("accuracy", (pred == y).float().mean().item())
print(model.weight.data.tolist(), model.bias.data.tolist())
