"""An evaluation function under @torch.no_grad(), manual_seed, model.eval()."""
import numpy as np
import torch
import torch.nn as nn

torch.manual_seed(0)
rng = np.random.default_rng(28)
model = nn.Sequential(nn.Linear(3, 5), nn.SiLU(), nn.Linear(5, 2))
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.tensor(rng.normal(size=tuple(p.shape)), dtype=torch.float32))
data = [(torch.tensor(rng.normal(size=(4, 3)), dtype=torch.float32), torch.tensor(rng.integers(0, 2, size=4)))
        for _ in range(3)]


@torch.no_grad()
def evaluate(model, batches):
    model.eval()
    total, correct, loss = 0, 0, 0.0
    for x, y in batches:
        logits = model(x)
        loss += nn.functional.cross_entropy(logits, y, reduction="sum").item()
        correct += (logits.argmax(1) == y).sum().item()
        total += y.numel()
    model.train()
    return loss / total, correct / total


print(evaluate(model, data))
out = model(data[0][0])
print(out.requires_grad, torch.is_grad_enabled(), model.training)
with torch.no_grad():
    print(model(data[0][0]).requires_grad)
