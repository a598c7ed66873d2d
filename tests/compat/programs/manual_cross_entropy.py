"""Cross-entropy by hand (log_softmax + gather) against F.cross_entropy, with gradients."""
import numpy as np
import torch
import torch.nn.functional as F

rng = np.random.default_rng(17)
logits = torch.tensor(rng.normal(size=(6, 5)), requires_grad=True)
target = torch.tensor(rng.integers(0, 5, size=6))
manual = -F.log_softmax(logits, dim=-1).gather(1, target.unsqueeze(1)).mean()
builtin = F.cross_entropy(logits, target)
print(manual.item(), builtin.item())
manual.backward()
g1 = logits.grad.clone()
logits.grad = None
builtin.backward()
print(torch.allclose(g1, logits.grad), g1.abs().sum().item())
onehot = F.one_hot(target, num_classes=5).float()
print(onehot.sum(0).tolist())
nll = F.nll_loss(F.log_softmax(logits, dim=1), target, reduction="sum")
print(nll.item(), F.cross_entropy(logits, target, label_smoothing=0.1).item())
