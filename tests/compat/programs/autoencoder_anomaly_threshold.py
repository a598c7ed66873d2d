"""An autoencoder anomaly detector in the style of the popular tabular tutorials: features
standardised with `mean`/`std`, class balance from `torch.unique(return_counts=True)`, a
Linear/ReLU encoder-decoder trained with MSELoss on normal rows only, reconstruction errors as
`torch.linalg.norm(x - recon, dim=1)`, the threshold `torch.quantile(errors, 0.95)`, flagged rows from
the one-argument `torch.where`, a median/quantile summary, precision and recall computed with
boolean tensors, and an exact-GELU check with `torch.erf`. Data and weights from NumPy."""

import math

import numpy as np
import torch
import torch.nn as nn

rng = np.random.default_rng(23)
normal = rng.normal(size=(60, 6))
anomalous = rng.normal(loc=2.5, scale=1.5, size=(8, 6))
X = torch.tensor(np.concatenate([normal, anomalous]), dtype=torch.float32)
y = torch.cat([torch.zeros(60, dtype=torch.long), torch.ones(8, dtype=torch.long)])

classes, counts = torch.unique(y, return_counts=True)
print("classes", classes.tolist(), "counts", counts.tolist(), "weights", (counts.sum() / counts).tolist())

mean, std = X[y == 0].mean(dim=0), X[y == 0].std(dim=0)
X = (X - mean) / std


class AutoEncoder(nn.Module):
    def __init__(self, n_features, bottleneck=2):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(n_features, 4), nn.ReLU(), nn.Linear(4, bottleneck))
        self.decoder = nn.Sequential(nn.Linear(bottleneck, 4), nn.ReLU(), nn.Linear(4, n_features))

    def forward(self, x):
        return self.decoder(self.encoder(x))


model = AutoEncoder(X.shape[1])
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.tensor(rng.normal(0, 0.4, size=tuple(p.shape)), dtype=torch.float32))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
criterion = nn.MSELoss()
train = X[y == 0]
for epoch in range(30):
    optimizer.zero_grad()
    loss = criterion(model(train), train)
    loss.backward()
    optimizer.step()
    if epoch % 10 == 0:
        print(f"epoch {epoch:2d} loss {loss.item():.5f}")

model.eval()
with torch.no_grad():
    recon = model(X)
    errors = torch.linalg.norm(X - recon, dim=1)
threshold = torch.quantile(errors[y == 0], 0.95)
flagged = torch.where(errors > threshold)[0]
print(f"threshold {threshold.item():.4f}", "flagged", flagged.tolist())
predicted = errors > threshold
tp = (predicted & (y == 1)).sum().item()
precision = tp / max(predicted.sum().item(), 1)
recall = tp / (y == 1).sum().item()
print(f"precision {precision:.3f} recall {recall:.3f}")
print("median error", torch.median(errors).item(), "per class", [errors[y == c].median().item() for c in classes.tolist()])
print("quartiles", torch.quantile(errors, torch.tensor([0.25, 0.5, 0.75])))
top = torch.topk(errors, 3)
print("worst rows", top.indices.tolist(), torch.linalg.vector_norm(X[top.indices], ord=1, dim=1))

x = torch.linspace(-3, 3, 7)
exact = 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))
print(torch.allclose(exact, nn.functional.gelu(x), atol=1e-6), exact)
