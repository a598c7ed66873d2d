"""A WGAN-GP loop on 2-D points: a critic and a generator (Linear + LeakyReLU / Tanh), the critic's
gradient penalty on interpolates through torch.autograd.grad(create_graph=True), Adam with
betas=(0.5, 0.9) and n_critic steps per generator step; then a Hessian-vector product and the
Hessian of a smooth (SiLU) energy network, and a double backward of a LayerNorm + GELU head with
backward(create_graph=True).
Data, noise and interpolation weights come from NumPy."""

import numpy as np
import torch
import torch.nn as nn

rng = np.random.default_rng(5)


def init_from_numpy(module, scale=0.4):
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.tensor(rng.normal(0, scale, size=tuple(p.shape)), dtype=torch.float32))


critic = nn.Sequential(nn.Linear(2, 12), nn.LeakyReLU(0.2), nn.Linear(12, 12), nn.LeakyReLU(0.2), nn.Linear(12, 1))
generator = nn.Sequential(nn.Linear(3, 12), nn.ReLU(), nn.Linear(12, 2), nn.Tanh())
init_from_numpy(critic)
init_from_numpy(generator)
opt_c = torch.optim.Adam(critic.parameters(), lr=1e-3, betas=(0.5, 0.9))
opt_g = torch.optim.Adam(generator.parameters(), lr=1e-3, betas=(0.5, 0.9))
lambda_gp, n_critic, batch = 10.0, 2, 24


def real_batch():
    angles = rng.uniform(0, 2 * np.pi, size=batch)
    return torch.tensor(np.stack([np.cos(angles), np.sin(angles)], 1) * 0.8, dtype=torch.float32)


def gradient_penalty(real, fake):
    alpha = torch.tensor(rng.uniform(size=(batch, 1)), dtype=torch.float32)
    mixed = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
    scores = critic(mixed)
    (grads,) = torch.autograd.grad(
        outputs=scores, inputs=mixed, grad_outputs=torch.ones_like(scores), create_graph=True, retain_graph=True
    )
    return ((grads.norm(2, dim=1) - 1) ** 2).mean()


for step in range(5):
    for _ in range(n_critic):
        real = real_batch()
        noise = torch.tensor(rng.normal(size=(batch, 3)), dtype=torch.float32)
        fake = generator(noise).detach()
        gp = gradient_penalty(real, fake)
        loss_c = critic(fake).mean() - critic(real).mean() + lambda_gp * gp
        opt_c.zero_grad()
        loss_c.backward()
        opt_c.step()
    noise = torch.tensor(rng.normal(size=(batch, 3)), dtype=torch.float32)
    loss_g = -critic(generator(noise)).mean()
    opt_g.zero_grad()
    loss_g.backward()
    opt_g.step()
    print(step, f"critic {loss_c.item():.5f}", f"gp {gp.item():.5f}", f"gen {loss_g.item():.5f}")

energy = nn.Sequential(nn.Linear(2, 8), nn.SiLU(), nn.Linear(8, 1))
init_from_numpy(energy)
x = torch.tensor([[0.3, -0.2]], requires_grad=True)
(g,) = torch.autograd.grad(energy(x).sum(), x, create_graph=True)
v = torch.tensor([[1.0, 0.5]])
(hv,) = torch.autograd.grad((g * v).sum(), x)
print("grad", g.detach(), "hvp", hv)
print(torch.autograd.functional.hessian(lambda t: energy(t).sum(), x).reshape(2, 2))

head = nn.Sequential(nn.Linear(2, 4), nn.LayerNorm(4), nn.GELU(), nn.Linear(4, 1))
init_from_numpy(head)
inp = torch.tensor(rng.normal(size=(5, 2)), dtype=torch.float32, requires_grad=True)
head(inp).pow(2).sum().backward(create_graph=True)
penalty = sum((p.grad**2).sum() for p in head.parameters())
head.zero_grad()
inp.grad = None
penalty.backward()
print(f"penalty {penalty.item():.5f}", head[0].weight.grad, inp.grad.sum(0))
