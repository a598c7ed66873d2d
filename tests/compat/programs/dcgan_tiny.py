"""pytorch/examples dcgan, shrunk: a Generator of ConvTranspose2d + BatchNorm2d + ReLU ending in Tanh,
a Discriminator of strided Conv2d + LeakyReLU ending in Sigmoid, `netG.apply(weights_init)` with the
classname checks, BCELoss, Adam with betas=(0.5, 0.999), labels made with `.fill_`, and the two-step
update (D on real then fake.detach(), G on fake). The weights are then set from NumPy and the noise
and the "real" images come from NumPy (the libraries' generators differ)."""

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim

nz, ngf, ndf, nc = 8, 4, 4, 1
batch_size = 6
niter = 2
device = torch.device("cpu")
rng = np.random.default_rng(7)


# custom weights initialization called on netG and netD
def weights_init(m):
    classname = m.__class__.__name__
    if classname.find("Conv") != -1:
        torch.nn.init.normal_(m.weight, 0.0, 0.02)
    elif classname.find("BatchNorm") != -1:
        torch.nn.init.normal_(m.weight, 1.0, 0.02)
        torch.nn.init.zeros_(m.bias)


class Generator(nn.Module):
    def __init__(self, ngpu):
        super(Generator, self).__init__()
        self.ngpu = ngpu
        self.main = nn.Sequential(
            # input is Z, going into a convolution
            nn.ConvTranspose2d(nz, ngf * 4, 4, 1, 0, bias=False),
            nn.BatchNorm2d(ngf * 4),
            nn.ReLU(True),
            # state size. (ngf*4) x 4 x 4
            nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ngf * 2),
            nn.ReLU(True),
            # state size. (ngf*2) x 8 x 8
            nn.ConvTranspose2d(ngf * 2, nc, 4, 2, 1, bias=False),
            nn.Tanh(),
            # state size. (nc) x 16 x 16
        )

    def forward(self, input):
        output = self.main(input)
        return output


class Discriminator(nn.Module):
    def __init__(self, ngpu):
        super(Discriminator, self).__init__()
        self.ngpu = ngpu
        self.main = nn.Sequential(
            # input is (nc) x 16 x 16
            nn.Conv2d(nc, ndf, 4, 2, 1, bias=False),
            nn.LeakyReLU(0.2, inplace=True),
            # state size. (ndf) x 8 x 8
            nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ndf * 2),
            nn.LeakyReLU(0.2, inplace=True),
            # state size. (ndf*2) x 4 x 4
            nn.Conv2d(ndf * 2, 1, 4, 1, 0, bias=False),
            nn.Sigmoid(),
        )

    def forward(self, input):
        output = self.main(input)
        return output.view(-1, 1).squeeze(1)


def from_numpy_init(net):
    with torch.no_grad():
        for name, p in net.named_parameters():
            if name.endswith("weight") and p.dim() == 1:
                p.copy_(torch.from_numpy(rng.normal(1.0, 0.02, size=p.shape).astype(np.float32)))
            elif p.dim() > 1:
                p.copy_(torch.from_numpy(rng.normal(0.0, 0.2, size=p.shape).astype(np.float32)))


netG = Generator(0).to(device)
netG.apply(weights_init)
print(netG)
bn = netG.main[1]
print("bias zero after init:", bool((bn.bias == 0).all()), "weight near 1:", bool((bn.weight - 1).abs().max() < 0.2))
from_numpy_init(netG)

netD = Discriminator(0).to(device)
netD.apply(weights_init)
from_numpy_init(netD)
print(sum(p.numel() for p in netG.parameters()), sum(p.numel() for p in netD.parameters()))

criterion = nn.BCELoss()

fixed_noise = torch.from_numpy(rng.normal(size=(batch_size, nz, 1, 1)).astype(np.float32))
real_label = 1
fake_label = 0

# setup optimizer
optimizerD = optim.Adam(netD.parameters(), lr=0.0002 * 10, betas=(0.5, 0.999))
optimizerG = optim.Adam(netG.parameters(), lr=0.0002 * 10, betas=(0.5, 0.999))

dataloader = [
    (torch.from_numpy(np.tanh(rng.normal(size=(batch_size, nc, 16, 16))).astype(np.float32)), None) for _ in range(2)
]

for epoch in range(niter):
    for i, data in enumerate(dataloader, 0):
        ############################
        # (1) Update D network: maximize log(D(x)) + log(1 - D(G(z)))
        ###########################
        # train with real
        netD.zero_grad()
        real_cpu = data[0].to(device)
        batch_size = real_cpu.size(0)
        label = torch.full((batch_size,), real_label, dtype=real_cpu.dtype, device=device)

        output = netD(real_cpu)
        errD_real = criterion(output, label)
        errD_real.backward()
        D_x = output.mean().item()

        # train with fake
        noise = torch.from_numpy(rng.normal(size=(batch_size, nz, 1, 1)).astype(np.float32)).to(device)
        fake = netG(noise)
        label.fill_(fake_label)
        output = netD(fake.detach())
        errD_fake = criterion(output, label)
        errD_fake.backward()
        D_G_z1 = output.mean().item()
        errD = errD_real + errD_fake
        optimizerD.step()

        ############################
        # (2) Update G network: maximize log(D(G(z)))
        ###########################
        netG.zero_grad()
        label.fill_(real_label)  # fake labels are real for generator cost
        output = netD(fake)
        errG = criterion(output, label)
        errG.backward()
        D_G_z2 = output.mean().item()
        optimizerG.step()

        print(
            "[%d/%d][%d/%d] Loss_D: %.4f Loss_G: %.4f D(x): %.4f D(G(z)): %.4f / %.4f"
            % (epoch, niter, i, len(dataloader), errD.item(), errG.item(), D_x, D_G_z1, D_G_z2)
        )

netG.eval()
with torch.no_grad():
    fake = netG(fixed_noise).detach().cpu()
print(fake.shape, round(fake.mean().item(), 4), round(fake.std().item(), 4))
print(netD.main[3].running_mean, netD.main[3].num_batches_tracked.item())
