"""nn.utils.rnn: pad_sequence, pack_padded_sequence, pad_packed_sequence, pack_sequence,
and LSTM/GRU/RNN on a PackedSequence (values, final states, gradients);
run with torch and with gradcraft as torch by tests/test_oracle_scripts.py."""

import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence, pad_sequence, pack_sequence
import numpy as np

rng = np.random.default_rng(1)
seqs = [torch.tensor(rng.normal(size=(n, 3)), dtype=torch.float32) for n in (2, 5, 3, 5)]
padded = pad_sequence(seqs, batch_first=True)
print(padded.shape, pad_sequence(seqs, padding_value=-1.0)[:, 0])
print(pad_sequence(seqs, batch_first=True, padding_side="left")[0])
packed = pack_padded_sequence(padded, torch.tensor([2, 5, 3, 5]), batch_first=True, enforce_sorted=False)
print(packed.batch_sizes, packed.sorted_indices, packed.unsorted_indices, packed.data.shape)
print(packed.data)
back, lens = pad_packed_sequence(packed, batch_first=True, total_length=6)
print(back.shape, lens)
sp = pack_sequence(sorted(seqs, key=lambda s: -s.shape[0]))
print(sp.batch_sizes, sp.sorted_indices)
for cls, kw in ((nn.LSTM, dict(num_layers=2, bidirectional=True)), (nn.GRU, dict(batch_first=True)), (nn.RNN, dict())):
    torch.manual_seed(0)
    m = cls(3, 4, **kw)
    with torch.no_grad():
        for i, p in enumerate(m.parameters()):
            p.copy_(torch.tensor(rng.normal(scale=0.4, size=tuple(p.shape)), dtype=torch.float32))
    x = padded.clone().requires_grad_(True)
    inp = x if kw.get("batch_first") else x.transpose(0, 1)
    pk = pack_padded_sequence(inp, [2, 5, 3, 5], batch_first=kw.get("batch_first", False), enforce_sorted=False)
    out, h = m(pk)
    print(type(out).__name__, out.batch_sizes)
    o, l = pad_packed_sequence(out, batch_first=True)
    hh = h[0] if isinstance(h, tuple) else h
    print(o.sum(-1), hh.sum(-1))
    (o.pow(2).sum() + hh.sum() + (h[1].sum() if isinstance(h, tuple) else 0)).backward()
    print(x.grad.sum(-1), m.weight_hh_l0.grad.sum())
    h0 = torch.tensor(rng.normal(size=tuple(hh.shape)), dtype=torch.float32)
    out2, h2 = m(pk, (h0, h0) if isinstance(h, tuple) else h0)
    print((h2[0] if isinstance(h2, tuple) else h2).sum(-1))
