"""A convolutional autoencoder: strided Conv2d down to a small code, ConvTranspose2d (stride 2,
output_padding) back up, Sigmoid output and MSE reconstruction loss, trained with Adam; also the
shapes each layer gives and ConvTranspose2d's output_size argument."""
import numpy as np
import torch
import torch.nn as nn

rng = np.random.default_rng(13)
yy, xx = np.mgrid[0:8, 0:8]
images = []
for i in range(6):
    cy, cx = rng.uniform(2, 6, size=2)
    images.append(np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / 4.0))
X = torch.tensor(np.stack(images)[:, None], dtype=torch.float32)

encoder = nn.Sequential(
    nn.Conv2d(1, 4, 3, stride=2, padding=1),
    nn.ReLU(),
    nn.Conv2d(4, 8, 3, stride=2, padding=1),
    nn.ReLU(),
)
decoder = nn.Sequential(
    nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1),
    nn.ReLU(),
    nn.ConvTranspose2d(4, 1, 3, stride=2, padding=1, output_padding=1),
    nn.Sigmoid(),
)
model = nn.Sequential(encoder, decoder)
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.tensor(rng.normal(0, 0.3, size=tuple(p.shape)), dtype=torch.float32))
print(model)
h = X
for layer in list(encoder) + list(decoder):
    h = layer(h)
    print(type(layer).__name__, tuple(h.shape))

opt = torch.optim.Adam(model.parameters(), lr=0.02)
for step in range(15):
    recon = model(X)
    loss = nn.functional.mse_loss(recon, X)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 3 == 0:
        print(f"step {step} loss {loss.item():.5f}")

up = nn.ConvTranspose2d(8, 2, 3, stride=2, padding=1)
with torch.no_grad():
    for p in up.parameters():
        p.copy_(torch.tensor(rng.normal(0, 0.3, size=tuple(p.shape)), dtype=torch.float32))
    code = encoder(X[:1])
    print(tuple(up(code).shape), tuple(up(code, output_size=[4, 4]).shape))
    print(round(up(code, output_size=[4, 4]).sum().item(), 4))
