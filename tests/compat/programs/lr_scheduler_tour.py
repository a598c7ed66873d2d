"""The learning-rate schedules of popular training scripts, each stepped on a small optimizer and
printed with `get_last_lr()`: CosineAnnealingWarmRestarts (T_0, T_mult, eta_min, fractional epochs
as in its docstring), CyclicLR (triangular, triangular2, exp_range; cycling SGD's momentum),
OneCycleLR (cos and linear), LambdaLR with a warm-up lambda per group, ChainedScheduler of
ConstantLR and ExponentialLR, and a scheduler's state_dict reloaded into a fresh one."""

import torch
import torch.nn as nn
from torch.optim.lr_scheduler import (
    ChainedScheduler,
    ConstantLR,
    CosineAnnealingWarmRestarts,
    CyclicLR,
    ExponentialLR,
    LambdaLR,
    OneCycleLR,
)

model = nn.Linear(3, 2)


def lrs(scheduler, steps, per_step=None):
    out = []
    for i in range(steps):
        scheduler.optimizer.step()
        if per_step is None:
            scheduler.step()
        else:
            scheduler.step(per_step(i))
        out.append(round(scheduler.get_last_lr()[0], 6))
    return out


opt = torch.optim.SGD(model.parameters(), lr=0.1)
sched = CosineAnnealingWarmRestarts(opt, T_0=3, T_mult=2, eta_min=0.001)
print("warm restarts", lrs(sched, 12), sched.T_i, sched.T_cur)

opt = torch.optim.SGD(model.parameters(), lr=0.1)
sched = CosineAnnealingWarmRestarts(opt, T_0=4)
iters = 3
print("fractional", lrs(sched, 9, lambda i: (i // iters) + (i % iters) / iters))

for mode in ("triangular", "triangular2", "exp_range"):
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = CyclicLR(opt, base_lr=0.01, max_lr=0.1, step_size_up=3, mode=mode, gamma=0.9)
    values = lrs(sched, 14)
    print(mode, values, round(opt.param_groups[0]["momentum"], 6))

opt = torch.optim.Adam(model.parameters(), lr=0.1)
sched = CyclicLR(opt, base_lr=0.01, max_lr=0.1, step_size_up=2, step_size_down=4, cycle_momentum=False)
print("adam cyclic", lrs(sched, 8))

for anneal in ("cos", "linear"):
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = OneCycleLR(opt, max_lr=0.5, total_steps=10, anneal_strategy=anneal, pct_start=0.3)
    print(anneal, lrs(sched, 9), round(opt.param_groups[0]["momentum"], 6))

opt = torch.optim.SGD([{"params": [model.weight]}, {"params": [model.bias], "lr": 0.01}], lr=0.1)
sched = LambdaLR(opt, lr_lambda=[lambda e: min(1.0, (e + 1) / 4), lambda e: 0.9**e])
for _ in range(5):
    opt.step()
    sched.step()
print("lambda groups", [round(v, 6) for v in sched.get_last_lr()])

opt = torch.optim.SGD(model.parameters(), lr=1.0)
sched = ChainedScheduler([ConstantLR(opt, factor=0.1, total_iters=2), ExponentialLR(opt, gamma=0.9)])
print("chained", lrs(sched, 5))

opt = torch.optim.SGD(model.parameters(), lr=0.1)
sched = CosineAnnealingWarmRestarts(opt, T_0=5, eta_min=0.01)
lrs(sched, 7)
state = sched.state_dict()
opt2 = torch.optim.SGD(model.parameters(), lr=0.1)
sched2 = CosineAnnealingWarmRestarts(opt2, T_0=5, eta_min=0.01)
sched2.load_state_dict(state)
print("resumed", state["T_cur"], state["last_epoch"], lrs(sched2, 3))
try:
    CosineAnnealingWarmRestarts(opt, T_0=0)
except ValueError as e:
    print("ValueError", "T_0" in str(e))
