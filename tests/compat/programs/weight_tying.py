"""Tied input and output embeddings: one parameter, two uses, gradients from both."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class TinyLM(nn.Module):
    def __init__(self, vocab=10, dim=4):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.proj = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, idx):
        return self.head(torch.tanh(self.proj(self.embed(idx))))


rng = np.random.default_rng(24)
model = TinyLM()
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.tensor(rng.normal(0, 0.5, size=tuple(p.shape)), dtype=torch.float32))
print(len(list(model.parameters())), model.head.weight is model.embed.weight)
print(list(model.state_dict().keys()))
idx = torch.tensor([[1, 2, 3], [4, 5, 6]])
opt = torch.optim.SGD(model.parameters(), lr=0.5)
for step in range(5):
    logits = model(idx[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, 10), idx[:, 1:].reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(step, loss.item())
print(model.embed.weight.grad.abs().sum().item())
