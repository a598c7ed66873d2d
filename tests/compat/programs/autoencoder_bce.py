"""A small autoencoder on binary patterns with BCELoss and Adam."""
import numpy as np
import torch
import torch.nn as nn

rng = np.random.default_rng(20)
data = torch.tensor((rng.random((24, 8)) > 0.5).astype(np.float32))
model = nn.Sequential(nn.Linear(8, 3), nn.Tanh(), nn.Linear(3, 8), nn.Sigmoid())
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.tensor(rng.normal(0, 0.5, size=tuple(p.shape)), dtype=torch.float32))
opt = torch.optim.Adam(model.parameters(), lr=0.03)
loss_fn = nn.BCELoss()
for epoch in range(20):
    opt.zero_grad()
    recon = model(data)
    loss = loss_fn(recon, data)
    loss.backward()
    opt.step()
    if epoch % 5 == 4:
        errors = ((recon > 0.5).float() != data).sum().item()
        print(epoch, f"{loss.item():.5f}", errors)
code = model[:2](data[:2])
print(code.shape, code.tolist())
