"""A character-level LSTM language model trained with truncated backpropagation through time: the
hidden state carried across chunks and detached, nn.LSTM with two layers and batch_first, gradient
clipping with clip_grad_norm_, then greedy generation from a prompt."""

import numpy as np
import torch
import torch.nn as nn

text = "hello world, hello there, world of words. " * 4
chars = sorted(set(text))
stoi = {ch: i for i, ch in enumerate(chars)}
itos = {i: ch for ch, i in stoi.items()}
data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
vocab_size = len(chars)
print("vocab", vocab_size, "length", len(data))


class CharRNN(nn.Module):
    def __init__(self, vocab, hidden=24, layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, 12)
        self.lstm = nn.LSTM(12, hidden, num_layers=layers, batch_first=True)
        self.decoder = nn.Linear(hidden, vocab)

    def forward(self, x, hidden=None):
        out, hidden = self.lstm(self.embed(x), hidden)
        return self.decoder(out), hidden


rng = np.random.default_rng(7)
model = CharRNN(vocab_size)
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.tensor(rng.uniform(-0.2, 0.2, size=tuple(p.shape)), dtype=torch.float32))
optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
criterion = nn.CrossEntropyLoss()
seq_len, batch = 10, 2
stream = data[: (len(data) - 1) // batch * batch]
inputs = data[:-1][: len(stream) - batch].view(batch, -1)
targets = data[1:][: len(stream) - batch].view(batch, -1)
for epoch in range(3):
    hidden = None
    total = 0.0
    for start in range(0, inputs.size(1) - seq_len + 1, seq_len):
        x = inputs[:, start : start + seq_len]
        y = targets[:, start : start + seq_len]
        if hidden is not None:
            hidden = tuple(h.detach() for h in hidden)
        logits, hidden = model(x, hidden)
        loss = criterion(logits.reshape(-1, vocab_size), y.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.5)
        optimizer.step()
        total += loss.item()
    print(f"epoch {epoch} mean loss {total / (inputs.size(1) // seq_len):.4f} last norm {norm.item():.4f}")

print([tuple(h.shape) for h in hidden])
model.eval()
with torch.no_grad():
    idx = torch.tensor([[stoi[c] for c in "hel"]])
    logits, h = model(idx)
    out = []
    for _ in range(12):
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        out.append(nxt.item())
        logits, h = model(nxt, h)
print(out)
