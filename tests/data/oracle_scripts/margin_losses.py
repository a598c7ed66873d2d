"""Margin and embedding losses in every reduction (values and gradients);
run with torch and with gradcraft as torch by tests/test_oracle_scripts.py."""

import torch
import torch.nn as nn
import torch.nn.functional as F
import numpy as np

rng = np.random.default_rng(2)


def T(a, rg=False, dt=torch.float32):
    return torch.tensor(np.asarray(a), dtype=dt, requires_grad=rg)


# margin losses
a, b = T(rng.normal(size=6), True), T(rng.normal(size=6), True)
y = torch.tensor([1.0, -1.0, 1.0, 1.0, -1.0, -1.0])
for red in ("mean", "sum", "none"):
    l = nn.MarginRankingLoss(margin=0.3, reduction=red)(a, b, y)
    l.sum().backward()
    print(l, a.grad, b.grad)
    a.grad = b.grad = None
    l = nn.HingeEmbeddingLoss(margin=0.8, reduction=red)(a, y)
    l.sum().backward()
    print(l, a.grad)
    a.grad = None
    e1, e2 = T(rng.normal(size=(4, 5)), True), T(rng.normal(size=(4, 5)), True)
    l = nn.CosineEmbeddingLoss(margin=0.1, reduction=red)(e1, e2, torch.tensor([1, -1, -1, 1]))
    l.sum().backward()
    print(l, e1.grad)
    an, po, ne = (T(rng.normal(size=(4, 5)), True) for _ in range(3))
    for swap in (False, True):
        for p in (2, 1):
            l = nn.TripletMarginLoss(margin=1.5, p=p, swap=swap, reduction=red)(an, po, ne)
            l.sum().backward()
            print(l, an.grad, ne.grad)
            an.grad = ne.grad = None
    lg = T(rng.normal(size=(4, 5)), True)
    for p in (1, 2):
        l = nn.MultiMarginLoss(p=p, margin=0.7, weight=T([1, 2, 0.5, 1, 1.5]), reduction=red)(
            lg, torch.tensor([0, 3, 4, 1])
        )
        l.sum().backward()
        print(l, lg.grad)
        lg.grad = None
    print(nn.MultiMarginLoss(reduction=red)(T(rng.normal(size=5)), torch.tensor(2)))
    print(
        nn.SoftMarginLoss(reduction=red)(a, y),
        nn.MultiLabelSoftMarginLoss(reduction=red)(lg, T(rng.integers(0, 2, size=(4, 5)))),
    )
print(nn.PairwiseDistance()(e1, e2), F.pairwise_distance(e1, e2, p=1, keepdim=True))
print(nn.TripletMarginLoss(), nn.MultiMarginLoss())
