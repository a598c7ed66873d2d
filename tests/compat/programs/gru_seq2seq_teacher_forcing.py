"""A GRU encoder-decoder that learns to reverse short digit sequences: the decoder runs step by step
(nn.GRU on one time step), with teacher forcing decided per batch by a fixed list of coin flips
(NumPy-drawn: the two libraries' random numbers differ), then greedy decoding."""

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SOS, V, T, H = 0, 6, 4, 16
rng = np.random.default_rng(3)
src = torch.tensor(rng.integers(1, V, size=(12, T)))
tgt = torch.flip(src, dims=[1])
use_teacher = rng.random(20) < 0.5


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(V, H)
        self.gru = nn.GRU(H, H, batch_first=True)

    def forward(self, x):
        return self.gru(self.embedding(x))


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(V, H)
        self.gru = nn.GRU(H, H, batch_first=True)
        self.out = nn.Linear(H, V)

    def forward(self, token, hidden):
        output, hidden = self.gru(F.relu(self.embedding(token)), hidden)
        return self.out(output.squeeze(1)), hidden


encoder, decoder = Encoder(), Decoder()
with torch.no_grad():
    for p in list(encoder.parameters()) + list(decoder.parameters()):
        p.copy_(torch.tensor(rng.normal(0, 0.3, size=tuple(p.shape)), dtype=torch.float32))
params = list(encoder.parameters()) + list(decoder.parameters())
optimizer = torch.optim.Adam(params, lr=0.01)
criterion = nn.NLLLoss()


def run(batch_src, batch_tgt, teacher_forcing):
    _, hidden = encoder(batch_src)
    token = torch.full((batch_src.size(0), 1), SOS, dtype=torch.long)
    loss, outputs = 0, []
    for t in range(T):
        logits, hidden = decoder(token, hidden)
        log_probs = F.log_softmax(logits, dim=1)
        loss = loss + criterion(log_probs, batch_tgt[:, t])
        top = log_probs.topk(1)[1]
        outputs.append(top.squeeze(1))
        token = batch_tgt[:, t].unsqueeze(1) if teacher_forcing else top.detach()
    return loss / T, torch.stack(outputs, dim=1)


for it in range(20):
    optimizer.zero_grad()
    loss, _ = run(src, tgt, bool(use_teacher[it]))
    loss.backward()
    optimizer.step()
    if it % 5 == 4:
        print(f"iter {it + 1} teacher={bool(use_teacher[it])} loss {loss.item():.4f}")

with torch.no_grad():
    loss, decoded = run(src[:3], tgt[:3], False)
print(decoded.shape, f"{loss.item():.4f}")
print("token accuracy", (run(src, tgt, False)[1] == tgt).float().mean().item())
