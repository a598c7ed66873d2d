"""A character-level language model without recurrence: the previous 3 characters' embeddings,
concatenated, predict the next one (Bengio-style MLP LM)."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

text = "hello world, hello gradcraft. the quick brown fox jumps over the lazy dog. " * 3
chars = sorted(set(text))
stoi = {c: i for i, c in enumerate(chars)}
data = torch.tensor([stoi[c] for c in text])
context = 3
X = torch.stack([data[i:i + context] for i in range(len(data) - context)])
Y = data[context:]


class CharMLP(nn.Module):
    def __init__(self, vocab, dim=8, hidden=32):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.hidden = nn.Linear(context * dim, hidden)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, idx):
        e = self.embed(idx).view(idx.shape[0], -1)
        return self.head(torch.tanh(self.hidden(e)))


rng = np.random.default_rng(2)
model = CharMLP(len(chars))
with torch.no_grad():
    for name, p in model.named_parameters():
        p.copy_(torch.tensor(rng.normal(0, 0.3, size=tuple(p.shape)), dtype=torch.float32))
opt = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.0)
for step in range(30):
    logits = model(X)
    loss = F.cross_entropy(logits, Y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 5 == 0:
        print(step, round(loss.item(), 5))

# greedy generation from a prompt
idx = [stoi[c] for c in "hel"]
with torch.no_grad():
    for _ in range(12):
        logits = model(torch.tensor([idx[-context:]]))
        idx.append(int(logits.argmax(-1).item()))
print("".join(chars[i] for i in idx))
print(idx)
