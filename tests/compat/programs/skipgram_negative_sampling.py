"""word2vec's skip-gram with negative sampling: center and context nn.Embedding tables, positive
pairs from a sliding window, negatives drawn (with NumPy) from the unigram distribution raised to
3/4, BCEWithLogitsLoss on the dot products, SGD; nearest neighbours by cosine similarity."""

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

corpus = "the cat sat on the mat the dog sat on the rug the cat saw the dog".split()
vocab = sorted(set(corpus))
w2i = {w: i for i, w in enumerate(vocab)}
ids = [w2i[w] for w in corpus]
pairs = [(ids[i], ids[j]) for i in range(len(ids)) for j in range(max(0, i - 2), min(len(ids), i + 3)) if i != j]
counts = np.bincount(ids, minlength=len(vocab)).astype(np.float64)
noise = counts**0.75 / (counts**0.75).sum()
rng = np.random.default_rng(5)
K = 3
negatives = torch.tensor(rng.choice(len(vocab), size=(len(pairs), K), p=noise))
centers = torch.tensor([c for c, _ in pairs])
contexts = torch.tensor([o for _, o in pairs])
print(len(vocab), len(pairs), negatives.shape)


class SkipGram(nn.Module):
    def __init__(self, n, d):
        super().__init__()
        self.in_embed = nn.Embedding(n, d)
        self.out_embed = nn.Embedding(n, d)

    def forward(self, center, context, negative):
        v = self.in_embed(center)  # (B, d)
        u_pos = self.out_embed(context)  # (B, d)
        u_neg = self.out_embed(negative)  # (B, K, d)
        pos = (v * u_pos).sum(-1)
        neg = torch.bmm(u_neg, v.unsqueeze(2)).squeeze(2)
        logits = torch.cat([pos.unsqueeze(1), neg], dim=1)
        labels = torch.zeros_like(logits)
        labels[:, 0] = 1.0
        return logits, labels


model = SkipGram(len(vocab), 8)
with torch.no_grad():
    model.in_embed.weight.copy_(torch.tensor(rng.uniform(-0.5, 0.5, (len(vocab), 8)), dtype=torch.float32))
    model.out_embed.weight.copy_(torch.tensor(rng.uniform(-0.5, 0.5, (len(vocab), 8)), dtype=torch.float32))
criterion = nn.BCEWithLogitsLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
for epoch in range(30):
    logits, labels = model(centers, contexts, negatives)
    loss = criterion(logits, labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if epoch % 10 == 0:
        print(f"epoch {epoch} loss {loss.item():.4f}")

emb = F.normalize(model.in_embed.weight.detach(), dim=1)
sims = emb @ emb.T
for word in ("cat", "sat"):
    row = sims[w2i[word]].clone()
    row[w2i[word]] = -1
    best = row.argmax().item()
    print(word, "->", vocab[best], f"{row[best].item():.4f}")
print(F.cosine_similarity(emb[w2i["cat"]], emb[w2i["dog"]], dim=0))
