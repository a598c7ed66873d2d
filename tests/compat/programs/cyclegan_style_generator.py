"""A CycleGAN-style image-to-image generator and a PatchGAN critic on 12x12 images: ReflectionPad2d,
Conv2d, InstanceNorm2d(affine), a residual block, nearest Upsample + conv (instead of transposed
convolutions), Tanh; least-squares GAN losses, an L1 cycle-consistency loss between two generators,
Adam with betas (0.5, 0.999); weights and images from NumPy."""

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

rng = np.random.default_rng(31)


class ResidualBlock(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.body = nn.Sequential(
            nn.ReflectionPad2d(1),
            nn.Conv2d(channels, channels, 3),
            nn.InstanceNorm2d(channels, affine=True),
            nn.ReLU(inplace=True),
            nn.ReflectionPad2d(1),
            nn.Conv2d(channels, channels, 3),
            nn.InstanceNorm2d(channels, affine=True),
        )

    def forward(self, x):
        return x + self.body(x)


def generator():
    return nn.Sequential(
        nn.ReflectionPad2d(2),
        nn.Conv2d(3, 6, 5),
        nn.InstanceNorm2d(6, affine=True),
        nn.ReLU(True),
        nn.Conv2d(6, 8, 3, stride=2, padding=1),
        nn.InstanceNorm2d(8, affine=True),
        nn.ReLU(True),
        ResidualBlock(8),
        nn.Upsample(scale_factor=2, mode="nearest"),
        nn.Conv2d(8, 6, 3, padding=1),
        nn.InstanceNorm2d(6, affine=True),
        nn.ReLU(True),
        nn.ReflectionPad2d(1),
        nn.Conv2d(6, 3, 3),
        nn.Tanh(),
    )


critic = nn.Sequential(
    nn.Conv2d(3, 6, 4, stride=2, padding=1),
    nn.LeakyReLU(0.2),
    nn.Conv2d(6, 8, 4, stride=2, padding=1),
    nn.InstanceNorm2d(8),
    nn.LeakyReLU(0.2),
    nn.Conv2d(8, 1, 3, padding=1),
)
g_ab, g_ba = generator(), generator()
with torch.no_grad():
    for net in (g_ab, g_ba, critic):
        for p in net.parameters():
            p.copy_(torch.tensor(rng.normal(0, 0.2, size=tuple(p.shape)), dtype=torch.float32))
print(g_ab[0], g_ab[2], g_ab[8], sum(p.numel() for p in g_ab.parameters()))
opt_g = torch.optim.Adam(list(g_ab.parameters()) + list(g_ba.parameters()), lr=2e-3, betas=(0.5, 0.999))
opt_d = torch.optim.Adam(critic.parameters(), lr=2e-3, betas=(0.5, 0.999))
domain_a = torch.tensor(rng.uniform(-1, 1, size=(4, 3, 12, 12)), dtype=torch.float32)
domain_b = torch.tensor(np.tanh(rng.normal(size=(4, 3, 12, 12)) * 0.5), dtype=torch.float32)

for step in range(4):
    fake_b = g_ab(domain_a)
    pred = critic(fake_b)
    loss_gan = F.mse_loss(pred, torch.ones_like(pred))
    loss_cycle = F.l1_loss(g_ba(fake_b), domain_a) + F.l1_loss(g_ab(g_ba(domain_b)), domain_b)
    loss_g = loss_gan + 10.0 * loss_cycle
    opt_g.zero_grad()
    loss_g.backward()
    opt_g.step()
    real_pred, fake_pred = critic(domain_b), critic(fake_b.detach())
    loss_d = 0.5 * (
        F.mse_loss(real_pred, torch.ones_like(real_pred)) + F.mse_loss(fake_pred, torch.zeros_like(fake_pred))
    )
    opt_d.zero_grad()
    loss_d.backward()
    opt_d.step()
    print(step, f"G {loss_g.item():.5f}", f"cycle {loss_cycle.item():.5f}", f"D {loss_d.item():.5f}")

with torch.no_grad():
    out = g_ab(domain_a[:1])
    print(tuple(out.shape), out.mean(), out.std(), critic(out).shape)
