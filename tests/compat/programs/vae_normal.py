"""A tiny VAE on 2-d points: the encoder gives a Normal over the latent, the reparameterized
sample (drawn here from fixed noise, loc + scale * eps, so both libraries see the same numbers)
goes through the decoder, the loss is the Normal likelihood's negative log_prob plus the analytic
KL to the prior; rsample's shapes and gradients checked on the side."""
import numpy as np
import torch
import torch.nn as nn
from torch.distributions import Normal, kl_divergence

rng = np.random.default_rng(4)
data = torch.tensor(rng.normal(size=(64, 2)) * [1.0, 0.3] @ [[0.8, 0.6], [-0.6, 0.8]], dtype=torch.float32)
noise = torch.tensor(rng.normal(size=(30, 64, 1)), dtype=torch.float32)


class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(2, 16), nn.Tanh(), nn.Linear(16, 2))
        self.decoder = nn.Sequential(nn.Linear(1, 16), nn.Tanh(), nn.Linear(16, 2))
        self.log_sigma = nn.Parameter(torch.zeros(2))

    def posterior(self, x):
        h = self.encoder(x)
        return Normal(h[:, :1], torch.exp(0.5 * h[:, 1:]))

    def loss(self, x, eps):
        q = self.posterior(x)
        z = q.loc + q.scale * eps
        likelihood = Normal(self.decoder(z), self.log_sigma.exp())
        prior = Normal(torch.zeros_like(q.loc), torch.ones_like(q.scale))
        return (-likelihood.log_prob(x).sum(dim=1) + kl_divergence(q, prior).sum(dim=1)).mean()


model = VAE()
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.tensor(rng.normal(0, 0.3, size=tuple(p.shape)), dtype=torch.float32))
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
for step in range(30):
    optimizer.zero_grad()
    loss = model.loss(data, noise[step])
    loss.backward()
    optimizer.step()
    if step % 10 == 0:
        print(step, f"{loss.item():.4f}")

q = model.posterior(data[:5])
print(q.batch_shape, q.event_shape, q.mean.shape, q.stddev.shape)
print(q.entropy().sum().item(), q.variance.mean().item())
z = q.rsample((3,))
print(z.shape, z.requires_grad, q.sample().requires_grad)
z.sum().backward()
print(model.encoder[2].weight.grad is not None)
