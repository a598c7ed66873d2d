"""Polynomial features fitted with Adam under a LambdaLR decay."""
import torch

x = torch.linspace(-1, 1, 21, dtype=torch.float64)
y = 0.5 - x + 2 * x ** 3
features = torch.stack([x ** k for k in range(4)], dim=1)
coef = torch.zeros(4, dtype=torch.float64, requires_grad=True)
opt = torch.optim.Adam([coef], lr=0.1)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda=lambda epoch: 0.95 ** epoch)
for epoch in range(60):
    opt.zero_grad()
    loss = ((features @ coef - y) ** 2).mean()
    loss.backward()
    opt.step()
    sched.step()
    if epoch % 20 == 0:
        print(epoch, loss.item(), sched.get_last_lr())
print([round(c, 4) for c in coef.tolist()])
