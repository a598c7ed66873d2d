"""k-fold cross-validation: the fold indices come from a NumPy permutation, each fold's train and
validation parts are torch.utils.data.Subset views of one TensorDataset, a fresh model per fold
(reset_parameters, then NumPy weights), and the mean and std of the fold accuracies; random_split
with fixed lengths shown on the side."""

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Subset, TensorDataset, random_split

rng = np.random.default_rng(41)
n, k = 60, 4
X = rng.normal(size=(n, 3))
y = ((X[:, 0] * X[:, 1] > 0) | (X[:, 2] > 1)).astype(np.int64)
dataset = TensorDataset(torch.tensor(X, dtype=torch.float32), torch.tensor(y))
perm = rng.permutation(n)
folds = np.array_split(perm, k)
init = [rng.normal(0, 0.5, size=s) for s in [(16, 3), (16,), (2, 16), (2,)]]


def make_model():
    model = nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, 2))
    for layer in model.children():
        if hasattr(layer, "reset_parameters"):
            layer.reset_parameters()
    with torch.no_grad():
        for p, w in zip(model.parameters(), init):
            p.copy_(torch.from_numpy(w).float())
    return model


scores = []
for fold, val_idx in enumerate(folds):
    train_idx = np.concatenate([f for j, f in enumerate(folds) if j != fold])
    train_set, val_set = Subset(dataset, train_idx.tolist()), Subset(dataset, val_idx.tolist())
    train_loader = DataLoader(train_set, batch_size=15)
    val_loader = DataLoader(val_set, batch_size=len(val_set))
    model = make_model()
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    for epoch in range(15):
        for xb, yb in train_loader:
            opt.zero_grad()
            F.cross_entropy(model(xb), yb).backward()
            opt.step()
    with torch.no_grad():
        xv, yv = next(iter(val_loader))
        acc = (model(xv).argmax(1) == yv).float().mean().item()
    scores.append(acc)
    print(f"fold {fold}: train {len(train_set)} val {len(val_set)} acc {acc:.4f}")
scores = torch.tensor(scores)
print(f"cv accuracy {scores.mean():.4f} +/- {scores.std():.4f}")

parts = random_split(dataset, [40, 20])
print([len(p) for p in parts], sorted(parts[0].indices + parts[1].indices) == list(range(n)))
fractions = random_split(dataset, [0.75, 0.25])
print([len(p) for p in fractions])
