"""cross_entropy / nll_loss with class weights, probability targets, ignore_index, label smoothing
and every reduction (values and gradients);
run with torch and with gradcraft as torch by tests/test_oracle_scripts.py."""

import torch
import torch.nn as nn
import torch.nn.functional as F
import numpy as np

rng = np.random.default_rng(0)
x0 = rng.normal(size=(4, 5))
t0 = np.array([1, 0, 4, 2])
w0 = np.array([0.5, 1.0, 2.0, 0.3, 1.5])
x3 = rng.normal(size=(2, 5, 3))
t3 = np.array([[1, 2, -100], [0, 4, 3]])
p0 = rng.random(size=(4, 5))
p0 = p0 / p0.sum(1, keepdims=True)
for red in ("mean", "sum", "none"):
    for ls in (0.0, 0.2):
        x = torch.tensor(x0, requires_grad=True)
        w = torch.tensor(w0)
        l = F.cross_entropy(x, torch.tensor(t0), weight=w, reduction=red, label_smoothing=ls)
        l.sum().backward()
        print(red, ls, l, x.grad)
        x = torch.tensor(x3, requires_grad=True)
        l = F.cross_entropy(x, torch.tensor(t3), weight=w, reduction=red, label_smoothing=ls, ignore_index=-100)
        l.sum().backward()
        print(l, x.grad.sum(1))
        x = torch.tensor(x3, requires_grad=True)
        l = F.cross_entropy(x, torch.tensor(t3).clamp(min=0), reduction=red, label_smoothing=ls, ignore_index=2)
        l.sum().backward()
        print(l, x.grad.sum(1))
        x = torch.tensor(x0, requires_grad=True)
        l = F.cross_entropy(x, torch.tensor(p0), reduction=red, label_smoothing=ls)
        l.sum().backward()
        print(l, x.grad)
        x = torch.tensor(x0, requires_grad=True)
        l = F.cross_entropy(x, torch.tensor(p0), weight=w, reduction=red, label_smoothing=ls)
        l.sum().backward()
        print(l, x.grad)
        x = torch.tensor(x0[0], requires_grad=True)
        l = F.cross_entropy(x, torch.tensor(3), weight=w, reduction=red, label_smoothing=ls)
        l.sum().backward()
        print(l, x.grad)
        l = F.nll_loss(torch.tensor(x3).log_softmax(1), torch.tensor(t3), weight=w, reduction=red)
        print(l)
crit = nn.CrossEntropyLoss(weight=torch.tensor(w0, dtype=torch.float32), ignore_index=1)
print(crit(torch.tensor(x0, dtype=torch.float32), torch.tensor(t0)))
print(list(crit.state_dict().keys()), list(nn.CrossEntropyLoss().state_dict().keys()))
print(nn.NLLLoss(weight=torch.tensor(w0))(torch.tensor(x0), torch.tensor(t0)))
