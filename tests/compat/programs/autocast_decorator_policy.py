"""torch.autocast as a decorator on forward and as nested blocks; the CPU op policy (matmuls in
bfloat16, losses and prod in float32, the rest in their inputs' dtype); precision switches a script
sets before training; a classifier trained with its forward under autocast."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

dtype = "bfloat16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "float16"
torch.set_float32_matmul_precision("high")
torch.backends.cudnn.benchmark = True
torch.backends.cudnn.deterministic = False
print(dtype == "float16", torch.backends.mps.is_available(), torch.get_float32_matmul_precision() == "high")
print(torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.benchmark, torch.is_autocast_enabled("cpu"))


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.norm, self.fc2 = nn.Linear(5, 12), nn.LayerNorm(12), nn.Linear(12, 3)

    @torch.autocast("cpu", dtype=torch.bfloat16)
    def forward(self, x):
        return self.fc2(F.gelu(self.norm(self.fc1(x))))


rng = np.random.default_rng(11)
X = torch.tensor(rng.normal(size=(24, 5)), dtype=torch.float32)
Y = torch.tensor(rng.integers(0, 3, size=24))
W = torch.tensor(rng.normal(size=(5, 5)), dtype=torch.float32)

with torch.autocast("cpu"):
    cpu_dtype = torch.get_autocast_dtype("cpu")
    print(torch.is_autocast_enabled("cpu"), cpu_dtype == torch.bfloat16, torch.is_autocast_enabled())
    h = X @ W
    checks = [
        h.dtype == torch.bfloat16,
        F.linear(X, W).dtype == torch.bfloat16,
        F.softmax(h, dim=-1).dtype == torch.bfloat16,
        F.log_softmax(X, dim=-1).dtype == torch.float32,
        F.cross_entropy(h, Y).dtype == torch.float32,
        F.mse_loss(h, X).dtype == torch.float32,
        h.prod(dim=1).dtype == torch.float32,
        h.sum().dtype == torch.bfloat16,
        torch.cat([h, X]).dtype == torch.float32,
        (h + 1).dtype == torch.bfloat16,
    ]
    print(checks)
    with torch.autocast("cpu", enabled=False):
        print((X @ W).dtype == torch.float32, torch.is_autocast_enabled("cpu"))
    with torch.autocast("cpu", dtype=torch.float16):
        print((X @ W).dtype == torch.float16)
    print((X @ W).dtype == torch.bfloat16, f"{F.cross_entropy(h, Y).item():.2f}")
print(torch.is_autocast_enabled("cpu"), (X @ W).dtype == torch.float32)

model = Classifier()
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.tensor(rng.normal(0, 0.4, size=tuple(p.shape)), dtype=torch.float32))
opt = torch.optim.Adam(model.parameters(), lr=0.05)
for step in range(6):
    logits = model(X)
    loss = F.cross_entropy(logits.float(), Y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    grads_fp32 = all(p.grad.dtype == torch.float32 for p in model.parameters())
    print(step, logits.dtype == torch.bfloat16, grads_fp32, f"{loss.item():.2f}")
with torch.no_grad():
    accuracy = (model(X).argmax(dim=1) == Y).float().mean()
print(f"accuracy {accuracy.item():.3f}")
