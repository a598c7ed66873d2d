"""Softmax regression on 2x3 "images": Flatten, LogSoftmax and NLLLoss."""
import numpy as np
import torch
import torch.nn as nn

rng = np.random.default_rng(21)
images = torch.tensor(rng.normal(size=(30, 2, 3)), dtype=torch.float32)
labels = (images.sum(dim=(1, 2)) > 0).long() + (images[:, 0, 0] > 1).long()
model = nn.Sequential(nn.Flatten(), nn.Linear(6, 3), nn.LogSoftmax(dim=1))
with torch.no_grad():
    model[1].weight.copy_(torch.tensor(rng.normal(0, 0.1, size=(3, 6)), dtype=torch.float32))
    model[1].bias.zero_()
opt = torch.optim.SGD(model.parameters(), lr=0.5)
loss_fn = nn.NLLLoss()
for step in range(15):
    opt.zero_grad()
    loss = loss_fn(model(images), labels)
    loss.backward()
    opt.step()
print(loss.item(), (model(images).argmax(1) == labels).float().mean().item())
print(model(images[:3]).exp().sum(dim=1).tolist())
print(model)
