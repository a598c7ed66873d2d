"""nn.MultiheadAttention on its own: self-attention with a boolean causal mask, the attention weights
averaged over heads and per head, cross-attention with kdim/vdim and a key_padding_mask, and the
parameters' names and shapes (in_proj_weight, out_proj)."""
import numpy as np
import torch
import torch.nn as nn

rng = np.random.default_rng(31)
E, H, L, S, N = 8, 2, 4, 5, 2
mha = nn.MultiheadAttention(E, H)
with torch.no_grad():
    for p in mha.parameters():
        p.copy_(torch.tensor(rng.normal(0, 0.4, size=tuple(p.shape)), dtype=torch.float32))
print(mha)
print([(k, tuple(v.shape)) for k, v in mha.state_dict().items()])

x = torch.tensor(rng.normal(size=(L, N, E)), dtype=torch.float32, requires_grad=True)
causal = torch.triu(torch.ones(L, L, dtype=torch.bool), diagonal=1)
out, weights = mha(x, x, x, attn_mask=causal)
print(tuple(out.shape), tuple(weights.shape))
print([[round(v, 4) for v in row] for row in weights[0].tolist()])
_, per_head = mha(x, x, x, attn_mask=causal, average_attn_weights=False)
print(tuple(per_head.shape), round(per_head[1, 1].sum().item(), 4))
out.pow(2).sum().backward()
print("input grad", round(x.grad.abs().sum().item(), 4), "in_proj grad", round(mha.in_proj_weight.grad.norm().item(), 4))

cross = nn.MultiheadAttention(E, 4, kdim=3, vdim=6, batch_first=True)
with torch.no_grad():
    for p in cross.parameters():
        p.copy_(torch.tensor(rng.normal(0, 0.4, size=tuple(p.shape)), dtype=torch.float32))
print([k for k in cross.state_dict()])
q = torch.tensor(rng.normal(size=(N, L, E)), dtype=torch.float32)
k = torch.tensor(rng.normal(size=(N, S, 3)), dtype=torch.float32)
v = torch.tensor(rng.normal(size=(N, S, 6)), dtype=torch.float32)
padding = torch.tensor([[False] * S, [False, False, False, True, True]])
out, w = cross(q, k, v, key_padding_mask=padding)
print(tuple(out.shape), [round(t, 4) for t in w[1, 0].tolist()])
out, w = cross(q, k, v, need_weights=False)
print(w is None, round(out.sum().item(), 4))
