"""Label smoothing: nn.CrossEntropyLoss(label_smoothing=0.1) checked against the formula written
by hand ((1 - eps) * NLL + eps * mean over classes of -log p), with ignore_index
and reduction='none' too, and a small classifier trained with and without smoothing (confidence compared)."""

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

rng = np.random.default_rng(61)
logits = torch.tensor(rng.normal(size=(6, 4)), dtype=torch.float32)
target = torch.tensor([0, 3, 1, 1, 2, 0])
eps = 0.1
log_p = F.log_softmax(logits, dim=-1)
nll = -log_p.gather(1, target.unsqueeze(1)).squeeze(1)
smooth = -log_p.mean(dim=-1)
manual = ((1 - eps) * nll + eps * smooth).mean()
builtin = nn.CrossEntropyLoss(label_smoothing=eps)(logits, target)
print(f"{manual.item():.6f} {builtin.item():.6f}", torch.allclose(manual, builtin))
print(F.cross_entropy(logits, torch.tensor([0, -100, 1, 1, -100, 0]), label_smoothing=0.2))
print(F.cross_entropy(logits, target, label_smoothing=0.1, reduction="none"))
soft = F.softmax(torch.tensor(rng.normal(size=(6, 4)), dtype=torch.float32), dim=1)
print((-(soft * log_p).sum(1)).mean())

X = torch.tensor(rng.normal(size=(40, 5)), dtype=torch.float32)
y = torch.tensor((rng.normal(size=40) > 0).astype(np.int64) + (X[:, 0] > 0.5).long().numpy())
init = [rng.normal(0, 0.4, size=s) for s in [(12, 5), (12,), (3, 12), (3,)]]
for smoothing in (0.0, 0.2):
    model = nn.Sequential(nn.Linear(5, 12), nn.ReLU(), nn.Linear(12, 3))
    with torch.no_grad():
        for p, w in zip(model.parameters(), init):
            p.copy_(torch.tensor(w, dtype=torch.float32))
    criterion = nn.CrossEntropyLoss(label_smoothing=smoothing)
    opt = torch.optim.Adam(model.parameters(), lr=0.03)
    for step in range(40):
        loss = criterion(model(X), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        confidence = model(X).softmax(1).max(1).values.mean()
    print(f"smoothing {smoothing}: loss {loss.item():.4f} mean confidence {confidence.item():.4f}")
