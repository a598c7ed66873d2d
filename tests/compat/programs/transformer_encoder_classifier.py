"""A sequence classifier on nn.TransformerEncoder (pre-norm layers, GELU, batch_first) with a
src_key_padding_mask for the padded positions, masked mean pooling and a linear head; trained with
AdamW, then evaluated under no_grad."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

rng = np.random.default_rng(29)
B, T, V, D = 6, 6, 9, 8
lengths = [6, 4, 5, 3, 6, 2]
tokens = rng.integers(1, V, size=(B, T))
for i, n in enumerate(lengths):
    tokens[i, n:] = 0
X = torch.tensor(tokens)
pad = X == 0
y = torch.tensor([int(tokens[i, :lengths[i]].sum() % 2) for i in range(B)])


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(V, D)
        layer = nn.TransformerEncoderLayer(D, nhead=2, dim_feedforward=16, dropout=0.0,
                                           activation="gelu", batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.head = nn.Linear(D, 2)

    def forward(self, idx, padding_mask):
        h = self.encoder(self.embed(idx), src_key_padding_mask=padding_mask)
        keep = (~padding_mask).unsqueeze(-1).float()
        pooled = (h * keep).sum(1) / keep.sum(1)
        return self.head(pooled)


model = Classifier()
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.tensor(rng.normal(0, 0.3, size=tuple(p.shape)), dtype=torch.float32))
print(model.encoder.layers[0])
print(len(model.encoder.layers), [k for k in model.state_dict() if k.startswith("encoder.layers.1.self_attn")])
opt = torch.optim.AdamW(model.parameters(), lr=0.01)
for step in range(10):
    loss = F.cross_entropy(model(X, pad), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 2 == 0:
        print(step, round(loss.item(), 4))
model.eval()
with torch.no_grad():
    logits = model(X, pad)
print([[round(v, 4) for v in row] for row in logits.tolist()])
print((logits.argmax(1) == y).sum().item(), "of", B)
