"""A sequence-to-sequence nn.Transformer learning to reverse short digit sequences: token and
position embeddings, a causal target mask from generate_square_subsequent_mask, teacher forcing
with Adam, then greedy decoding token by token in eval mode (dropout 0)."""
import math

import numpy as np
import torch
import torch.nn as nn

rng = np.random.default_rng(21)
VOCAB, BOS, LENGTH, D = 7, 6, 5, 16
seqs = rng.integers(0, 6, size=(8, LENGTH))
src = torch.tensor(seqs)
tgt_out = torch.tensor(seqs[:, ::-1].copy())
tgt_in = torch.cat([torch.full((8, 1), BOS), tgt_out[:, :-1]], dim=1)


class Seq2Seq(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.pos = nn.Embedding(LENGTH, D)
        self.transformer = nn.Transformer(
            d_model=D, nhead=2, num_encoder_layers=1, num_decoder_layers=1,
            dim_feedforward=32, dropout=0.0, batch_first=True,
        )
        self.out = nn.Linear(D, VOCAB)

    def encode_tokens(self, idx):
        positions = torch.arange(idx.shape[1])
        return self.embed(idx) * math.sqrt(D) + self.pos(positions)

    def forward(self, src, tgt):
        mask = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1])
        h = self.transformer(self.encode_tokens(src), self.encode_tokens(tgt), tgt_mask=mask)
        return self.out(h)


model = Seq2Seq()
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.tensor(rng.normal(0, 0.2, size=tuple(p.shape)), dtype=torch.float32))
print(sum(p.numel() for p in model.parameters()), "parameters")
print(nn.Transformer.generate_square_subsequent_mask(3))
opt = torch.optim.Adam(model.parameters(), lr=0.01)
loss_fn = nn.CrossEntropyLoss()
for step in range(12):
    logits = model(src, tgt_in)
    loss = loss_fn(logits.reshape(-1, VOCAB), tgt_out.reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 3 == 0:
        print(f"step {step}: loss {loss.item():.4f}")

model.eval()
with torch.no_grad():
    decoded = torch.full((2, 1), BOS)
    for _ in range(LENGTH):
        logits = model(src[:2], decoded)
        decoded = torch.cat([decoded, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    print("logits", [round(v, 4) for v in logits[0, -1].tolist()])
print(decoded[:, 1:].tolist())
print(tgt_out[:2].tolist())
