"""The pytorch/examples VAE, shrunk to 16-pixel "images": fc encoder to mu and logvar, the
reparameterization trick z = mu + eps * std (eps drawn with NumPy, as torch.randn_like would, so
both libraries see one draw), BCE reconstruction summed plus the KL term, Adam; then decoding a
grid of latent points."""

import numpy as np
import torch
from torch import nn, optim
from torch.nn import functional as F

rng = np.random.default_rng(12)
protos = (rng.random((3, 16)) > 0.5).astype(np.float32)
data = torch.tensor(
    np.clip(protos[rng.integers(0, 3, size=32)] + rng.normal(0, 0.1, (32, 16)), 0, 1), dtype=torch.float32
)
eps_draws = torch.tensor(rng.normal(size=(25, 32, 2)), dtype=torch.float32)


class VAE(nn.Module):
    def __init__(self):
        super(VAE, self).__init__()  # noqa: UP008
        self.fc1 = nn.Linear(16, 12)
        self.fc21 = nn.Linear(12, 2)
        self.fc22 = nn.Linear(12, 2)
        self.fc3 = nn.Linear(2, 12)
        self.fc4 = nn.Linear(12, 16)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar, eps):
        std = torch.exp(0.5 * logvar)
        return mu + eps * std

    def decode(self, z):
        h3 = F.relu(self.fc3(z))
        return torch.sigmoid(self.fc4(h3))

    def forward(self, x, eps):
        mu, logvar = self.encode(x.view(-1, 16))
        z = self.reparameterize(mu, logvar, eps)
        return self.decode(z), mu, logvar


def loss_function(recon_x, x, mu, logvar):
    BCE = F.binary_cross_entropy(recon_x, x.view(-1, 16), reduction="sum")
    KLD = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return BCE + KLD, BCE, KLD


model = VAE()
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.tensor(rng.normal(0, 0.3, size=tuple(p.shape)), dtype=torch.float32))
optimizer = optim.Adam(model.parameters(), lr=1e-2)
model.train()
for epoch in range(25):
    optimizer.zero_grad()
    recon_batch, mu, logvar = model(data, eps_draws[epoch])
    loss, bce, kld = loss_function(recon_batch, data, mu, logvar)
    loss.backward()
    optimizer.step()
    if epoch % 6 == 0:
        print(
            "====> Epoch: {} Average loss: {:.4f} (BCE {:.3f}, KLD {:.3f})".format(  # noqa: UP032
                epoch, loss.item() / len(data), bce.item(), kld.item()
            )
        )

model.eval()
with torch.no_grad():
    axis = torch.linspace(-1, 1, 3)
    grid = torch.stack([axis.repeat_interleave(3), axis.repeat(3)], dim=1)
    sample = model.decode(grid)
    print(sample.shape, sample.view(9, 4, 4)[0, 0])
    mu, logvar = model.encode(data[:4])
    print(mu, logvar.exp())
