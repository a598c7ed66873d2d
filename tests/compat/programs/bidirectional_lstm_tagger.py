"""A part-of-speech style tagger: embeddings, a two-layer bidirectional LSTM (batch_first) whose
forward and backward states are concatenated, per-token logits and a cross-entropy loss that
ignores padding; h_n / c_n shapes and the reverse-direction parameter names printed."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sentences = [["the", "dog", "runs"], ["a", "cat", "sleeps", "now"], ["the", "cat", "runs"], ["dogs", "bark"]]
tags = [[0, 1, 2], [0, 1, 2, 3], [0, 1, 2], [1, 2]]
words = {w: i + 1 for i, w in enumerate(sorted({w for s in sentences for w in s}))}
T = max(len(s) for s in sentences)
X = torch.tensor([[words[w] for w in s] + [0] * (T - len(s)) for s in sentences])
Y = torch.tensor([t + [-100] * (T - len(t)) for t in tags])


class Tagger(nn.Module):
    def __init__(self, vocab, n_tags, dim=6, hidden=8):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.lstm = nn.LSTM(dim, hidden, num_layers=2, bidirectional=True, batch_first=True)
        self.out = nn.Linear(2 * hidden, n_tags)

    def forward(self, idx):
        h, (h_n, c_n) = self.lstm(self.embed(idx))
        return self.out(h), h_n, c_n


rng = np.random.default_rng(17)
model = Tagger(len(words) + 1, 4)
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.tensor(rng.normal(0, 0.3, size=tuple(p.shape)), dtype=torch.float32))
print([name for name, _ in model.lstm.named_parameters()][4:8])
logits, h_n, c_n = model(X)
print(tuple(logits.shape), tuple(h_n.shape), tuple(c_n.shape))
opt = torch.optim.Adam(model.parameters(), lr=0.05)
for step in range(6):
    logits, _, _ = model(X)
    loss = F.cross_entropy(logits.reshape(-1, 4), Y.reshape(-1), ignore_index=-100)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 2 == 0:
        print(step, round(loss.item(), 4))
with torch.no_grad():
    pred = model(X)[0].argmax(-1)
print(pred.tolist())
print("grad of the reverse input weights", round(model.lstm.weight_ih_l1_reverse.grad.abs().sum().item(), 4))
