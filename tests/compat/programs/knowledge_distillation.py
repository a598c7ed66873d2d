"""Knowledge distillation: a fixed teacher MLP, a smaller student trained on a mix of the hard-label
cross-entropy and the soft-target KL divergence at temperature T (nn.KLDivLoss(reduction="batchmean")
on log_softmax(student / T) against softmax(teacher / T), scaled by T*T; log_target=True and the
formula written by hand checked against it), and the student's agreement with the teacher printed."""

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

rng = np.random.default_rng(33)
X = torch.tensor(rng.normal(size=(64, 6)), dtype=torch.float32)
teacher = nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Linear(32, 4))
student = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 4))
for net in (teacher, student):
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.tensor(rng.normal(0, 0.5, size=tuple(p.shape)), dtype=torch.float32))
teacher.eval()
for p in teacher.parameters():
    p.requires_grad_(False)
with torch.no_grad():
    teacher_logits = teacher(X)
y = teacher_logits.argmax(1)
print([int((y == c).sum()) for c in range(4)])

T, alpha = 3.0, 0.7


def kl_by_hand(log_q, p):
    """KL(p || q) averaged over the batch: KLDivLoss(reduction="batchmean")'s formula."""
    return (p * (p.log() - log_q)).sum() / p.size(0)


kl = nn.KLDivLoss(reduction="batchmean")
s = F.log_softmax(student(X) / T, dim=1)
t = F.softmax(teacher_logits / T, dim=1)
print(torch.allclose(kl(s, t), nn.KLDivLoss(reduction="batchmean", log_target=True)(s, t.log()), atol=1e-6))
print(torch.allclose(kl(s, t), kl_by_hand(s, t), atol=1e-6), f"{F.kl_div(s, t, reduction='sum').item():.5f}")

optimizer = torch.optim.Adam(student.parameters(), lr=0.02)
for epoch in range(30):
    logits = student(X)
    soft_loss = kl(F.log_softmax(logits / T, dim=1), F.softmax(teacher_logits / T, dim=1)) * (T * T)
    hard_loss = F.cross_entropy(logits, y)
    loss = alpha * soft_loss + (1 - alpha) * hard_loss
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if epoch % 10 == 0:
        print(f"epoch {epoch} soft {soft_loss.item():.4f} hard {hard_loss.item():.4f} total {loss.item():.4f}")
with torch.no_grad():
    agree = (student(X).argmax(1) == y).float().mean()
print(f"agreement {agree.item():.3f}", all(p.grad is None for p in teacher.parameters()))
