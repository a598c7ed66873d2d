"""A denoising autoencoder: inputs corrupted by Gaussian noise and by masking noise (both drawn with
NumPy up front), a bottlenecked encoder/decoder with LeakyReLU, MSE against the clean input,
Adam with weight decay; reconstruction error on clean vs corrupted inputs compared at the end."""

import numpy as np
import torch
import torch.nn as nn

rng = np.random.default_rng(21)
basis = rng.normal(size=(3, 20))
clean = torch.tensor(rng.normal(size=(64, 3)) @ basis, dtype=torch.float32)
gauss = torch.tensor(rng.normal(0, 0.3, size=(40, 64, 20)), dtype=torch.float32)
keep = torch.tensor(rng.random((40, 64, 20)) > 0.2)


class DAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(20, 10), nn.LeakyReLU(0.1), nn.Linear(10, 3))
        self.decoder = nn.Sequential(nn.Linear(3, 10), nn.LeakyReLU(0.1), nn.Linear(10, 20))

    def forward(self, x):
        return self.decoder(self.encoder(x))


model = DAE()
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.tensor(rng.normal(0, 0.3, size=tuple(p.shape)), dtype=torch.float32))
optimizer = torch.optim.Adam(model.parameters(), lr=5e-3, weight_decay=1e-4)
loss_fn = nn.MSELoss()
for step in range(40):
    noisy = (clean + gauss[step]) * keep[step]
    recon = model(noisy)
    loss = loss_fn(recon, clean)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step % 10 == 9:
        print(f"step {step + 1:3d}  loss {loss.item():8.4f}")

model.eval()
with torch.no_grad():
    noisy = clean + gauss[0]
    print("noisy input error", round(loss_fn(noisy, clean).item(), 4))
    print("denoised error   ", round(loss_fn(model(noisy), clean).item(), 4))
    codes = model.encoder(clean)
    print(codes.shape, codes.std(dim=0))
