"""A sequence-to-sequence reverser with variable-length inputs: an embedding, a bidirectional GRU
encoder over pack_padded_sequence(enforce_sorted=False), pad_packed_sequence for the encoder states,
a GRU decoder with teacher forcing and dot-product attention over the unpadded positions, and a
CrossEntropyLoss with ignore_index for the padding and class weights; gradient clipping, Adam."""

import numpy as np
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence, pad_sequence

rng = np.random.default_rng(11)
PAD, BOS, VOCAB, HID = 0, 1, 8, 12


class Seq2Seq(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 6, padding_idx=PAD)
        self.encoder = nn.GRU(6, HID // 2, batch_first=True, bidirectional=True)
        self.decoder = nn.GRU(6, HID, batch_first=True)
        self.out = nn.Linear(2 * HID, VOCAB)

    def forward(self, src, lengths, tgt_in):
        packed = pack_padded_sequence(self.embed(src), lengths, batch_first=True, enforce_sorted=False)
        enc_packed, h = self.encoder(packed)
        enc, enc_lengths = pad_packed_sequence(enc_packed, batch_first=True, total_length=src.shape[1])
        h0 = torch.cat([h[0], h[1]], dim=-1).unsqueeze(0)
        dec, _ = self.decoder(self.embed(tgt_in), h0)
        scores = dec @ enc.transpose(1, 2)
        mask = torch.arange(src.shape[1])[None, None, :] >= enc_lengths[:, None, None]
        attn = scores.masked_fill(mask, float("-inf")).softmax(-1)
        return self.out(torch.cat([dec, attn @ enc], dim=-1))


def batch(n):
    seqs = [torch.tensor(rng.integers(2, VOCAB, size=int(rng.integers(2, 7)))) for _ in range(n)]
    lengths = torch.tensor([len(s) for s in seqs])
    src = pad_sequence(seqs, batch_first=True, padding_value=PAD)
    tgt = pad_sequence([s.flip(0) for s in seqs], batch_first=True, padding_value=PAD)
    tgt_in = torch.cat([torch.full((n, 1), BOS), tgt[:, :-1]], dim=1)
    return src, lengths, tgt_in, tgt


model = Seq2Seq()
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.tensor(rng.normal(0, 0.3, size=tuple(p.shape)), dtype=torch.float32))
weights = torch.ones(VOCAB)
weights[2] = 0.5
criterion = nn.CrossEntropyLoss(weight=weights, ignore_index=PAD)
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)

for step in range(6):
    src, lengths, tgt_in, tgt = batch(5)
    logits = model(src, lengths, tgt_in)
    loss = criterion(logits.reshape(-1, VOCAB), tgt.reshape(-1))
    optimizer.zero_grad()
    loss.backward()
    norm = nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    if step % 2 == 0:
        print(step, f"loss {loss.item():.5f}", f"norm {norm.item():.5f}")

src, lengths, tgt_in, tgt = batch(4)
with torch.no_grad():
    logits = model(src, lengths, tgt_in)
    pred = logits.argmax(-1)
    keep = tgt != PAD
    print("lengths", lengths.tolist(), "token accuracy", f"{(pred[keep] == tgt[keep]).float().mean().item():.4f}")
    print(criterion(logits.reshape(-1, VOCAB), tgt.reshape(-1)))
    packed = pack_padded_sequence(model.embed(src), lengths, batch_first=True, enforce_sorted=False)
    print(packed.batch_sizes, packed.sorted_indices, packed.data.shape)
