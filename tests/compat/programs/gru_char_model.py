"""A character-level GRU language model: embeddings, a one-layer GRU carrying its hidden state,
a linear decoder; trained with Adam and gradient clipping, then greedy generation one character
at a time from the hidden state."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

text = "to be or not to be that is the question. " * 4
chars = sorted(set(text))
stoi = {c: i for i, c in enumerate(chars)}
data = torch.tensor([stoi[c] for c in text])
seq_len, batch = 12, 4


class CharGRU(nn.Module):
    def __init__(self, vocab, emb=8, hidden=24):
        super().__init__()
        self.embed = nn.Embedding(vocab, emb)
        self.gru = nn.GRU(emb, hidden)
        self.decoder = nn.Linear(hidden, vocab)

    def forward(self, idx, hidden=None):
        out, hidden = self.gru(self.embed(idx), hidden)  # (T, B, H): sequence first
        return self.decoder(out), hidden


rng = np.random.default_rng(8)
model = CharGRU(len(chars))
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.tensor(rng.normal(0, 0.25, size=tuple(p.shape)), dtype=torch.float32))
opt = torch.optim.Adam(model.parameters(), lr=0.02)
starts = [0, 37, 71, 103]
x = torch.stack([data[s:s + seq_len] for s in starts], dim=1)
y = torch.stack([data[s + 1:s + seq_len + 1] for s in starts], dim=1)
for step in range(20):
    logits, _ = model(x)
    loss = F.cross_entropy(logits.view(-1, len(chars)), y.view(-1))
    opt.zero_grad()
    loss.backward()
    norm = nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    if step % 4 == 0:
        print(step, round(loss.item(), 4), round(float(norm), 4))

model.eval()
with torch.no_grad():
    idx = torch.tensor([[stoi["t"]]])
    hidden = None
    out = "t"
    for _ in range(15):
        logits, hidden = model(idx, hidden)
        nxt = int(logits[-1, 0].argmax())
        out += chars[nxt]
        idx = torch.tensor([[nxt]])
print(repr(out))
print("hidden", tuple(hidden.shape), round(hidden.abs().sum().item(), 4))
