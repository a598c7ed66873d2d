"""ReduceLROnPlateau driven by a validation loss that stalls."""
import torch

param = torch.zeros(1, requires_grad=True)
opt = torch.optim.SGD([param], lr=1.0)
sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="min", factor=0.5, patience=2, cooldown=1,
                                                   min_lr=0.05)
val_losses = [1.0, 0.9, 0.9, 0.9, 0.9, 0.85, 0.85, 0.85, 0.85, 0.85, 0.85, 0.85, 0.85, 0.85, 0.85]
for epoch, val in enumerate(val_losses):
    opt.step()
    sched.step(val)
    print(epoch, opt.param_groups[0]["lr"])
