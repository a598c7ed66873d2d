"""Metric learning with a siamese encoder: one shared network embeds anchor, positive and negative
points, the triplet margin loss is written out with norms (max(d(a,p) - d(a,n) + margin, 0)), the
contrastive loss on pairs too, embeddings L2-normalised with F.normalize, and retrieval accuracy by
cosine similarity at the end; triplets are chosen with NumPy."""

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

rng = np.random.default_rng(39)
centers = rng.normal(0, 2, size=(4, 5))
labels = np.repeat(np.arange(4), 10)
points = torch.tensor(centers[labels] + rng.normal(0, 1.0, size=(40, 5)), dtype=torch.float32)
anchors = rng.integers(0, 40, size=60)
positives = np.array([rng.choice(np.flatnonzero(labels == labels[a])) for a in anchors])
negatives = np.array([rng.choice(np.flatnonzero(labels != labels[a])) for a in anchors])


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Linear(16, 3))

    def forward(self, x):
        return F.normalize(self.net(x), p=2, dim=1)


def triplet_loss(a, p, n, margin=0.5):
    d_ap = (a - p).pow(2).sum(1).add(1e-8).sqrt()  # eps: an anchor may be its own positive
    d_an = (a - n).pow(2).sum(1).add(1e-8).sqrt()
    return torch.clamp(d_ap - d_an + margin, min=0.0).mean(), (d_ap - d_an + margin > 0).float().mean()


def contrastive_loss(x1, x2, same, margin=1.0):
    d = (x1 - x2).pow(2).sum(1).add(1e-8).sqrt()
    return (same * d.pow(2) + (1 - same) * F.relu(margin - d).pow(2)).mean()


encoder = Encoder()
with torch.no_grad():
    for p in encoder.parameters():
        p.copy_(torch.tensor(rng.normal(0, 0.5, size=tuple(p.shape)), dtype=torch.float32))
opt = torch.optim.Adam(encoder.parameters(), lr=0.02)
a_idx, p_idx, n_idx = (torch.tensor(i) for i in (anchors, positives, negatives))
for epoch in range(20):
    emb = encoder(points)
    loss, active = triplet_loss(emb[a_idx], emb[p_idx], emb[n_idx])
    same = torch.ones(len(a_idx))
    pair_loss = contrastive_loss(emb[a_idx], emb[p_idx], same) + contrastive_loss(emb[a_idx], emb[n_idx], 1 - same)
    total = loss + 0.1 * pair_loss
    opt.zero_grad()
    total.backward()
    opt.step()
    if epoch % 5 == 0:
        print(f"epoch {epoch} triplet {loss.item():.4f} active {active.item():.3f} pairs {pair_loss.item():.4f}")

with torch.no_grad():
    emb = encoder(points)
    sims = emb @ emb.T
    sims = sims - 4.0 * torch.eye(40)
    nearest = sims.argmax(dim=1)
lab = torch.tensor(labels)
print(f"1-NN accuracy {(lab[nearest] == lab).float().mean().item():.3f}", emb.norm(dim=1)[:3])
print(F.cosine_similarity(emb[:2], emb[10:12], dim=1))
