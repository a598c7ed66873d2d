"""A mixture density network for a one-to-many mapping (x from y = f(x) + noise): the net outputs
mixture logits, means and log standard deviations; the negative log-likelihood is
-logsumexp(log_softmax(pi) + Normal(mu, sigma).log_prob(y)) written with torch.distributions, and
the MixtureSameFamily-free mean of the mixture and most likely component printed."""

import math

import numpy as np
import torch
import torch.nn as nn
from torch.distributions import Normal

rng = np.random.default_rng(47)
y_np = rng.uniform(-1, 1, size=(120, 1))
x_np = np.sin(3 * y_np) + 0.3 * y_np + rng.normal(0, 0.05, size=(120, 1))
x = torch.tensor(x_np, dtype=torch.float32)
y = torch.tensor(y_np, dtype=torch.float32)
K = 3


class MDN(nn.Module):
    def __init__(self, hidden=20):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(1, hidden), nn.Tanh())
        self.pi = nn.Linear(hidden, K)
        self.mu = nn.Linear(hidden, K)
        self.log_sigma = nn.Linear(hidden, K)

    def forward(self, x):
        h = self.body(x)
        return self.pi(h), self.mu(h), self.log_sigma(h).clamp(-5, 3)


def mdn_nll(logits, mu, log_sigma, y):
    log_pi = torch.log_softmax(logits, dim=-1)
    comp = Normal(mu, log_sigma.exp())
    return -torch.logsumexp(log_pi + comp.log_prob(y), dim=-1).mean()


model = MDN()
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.tensor(rng.normal(0, 0.5, size=tuple(p.shape)), dtype=torch.float32))
opt = torch.optim.Adam(model.parameters(), lr=0.02)
for step in range(30):
    loss = mdn_nll(*model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 10 == 0:
        print(f"step {step} nll {loss.item():.4f}")
print(f"final nll {loss.item():.4f}")

with torch.no_grad():
    probe = torch.tensor([[-0.5], [0.0], [0.5]])
    logits, mu, log_sigma = model(probe)
    pi = logits.softmax(-1)
    print(pi, mu)
    print((pi * mu).sum(-1), mu.gather(1, pi.argmax(-1, keepdim=True)).squeeze(1))
    manual = -0.5 * ((y[:3] - mu[:1]) / log_sigma[:1].exp()) ** 2 - log_sigma[:1] - 0.5 * math.log(2 * math.pi)
    print(torch.allclose(manual, Normal(mu[:1], log_sigma[:1].exp()).log_prob(y[:3]), atol=1e-5))
