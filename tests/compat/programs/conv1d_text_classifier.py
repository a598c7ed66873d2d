"""A convolutional text classifier (Kim-style CNN): token embeddings, Conv1d filters of widths 2
and 3 over the sequence, max over time with F.max_pool1d and AdaptiveMaxPool1d, dropout in
training only, a linear head; trained on a toy sentiment set."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sentences = [
    ("good great fun film", 1), ("bad boring awful plot", 0), ("great acting good story", 1),
    ("awful bad film", 0), ("fun good good", 1), ("boring plot bad acting", 0),
    ("great fun", 1), ("awful boring", 0),
]
vocab = {w: i + 1 for i, w in enumerate(sorted({w for s, _ in sentences for w in s.split()}))}
length = 5
X = torch.tensor([[vocab[w] for w in s.split()] + [0] * (length - len(s.split())) for s, _ in sentences])
y = torch.tensor([label for _, label in sentences])


class TextCNN(nn.Module):
    def __init__(self, vocab_size, dim=6, filters=4):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, dim)
        self.conv2 = nn.Conv1d(dim, filters, kernel_size=2)
        self.conv3 = nn.Conv1d(dim, filters, kernel_size=3, padding=1)
        self.pool = nn.AdaptiveMaxPool1d(1)
        self.dropout = nn.Dropout(0.5)
        self.fc = nn.Linear(2 * filters, 2)

    def forward(self, idx):
        e = self.embedding(idx).transpose(1, 2)  # (batch, channels, length)
        a = F.relu(self.conv2(e))
        a = F.max_pool1d(a, kernel_size=a.shape[2]).squeeze(2)
        b = self.pool(F.relu(self.conv3(e))).squeeze(2)
        return self.fc(self.dropout(torch.cat([a, b], dim=1)))


rng = np.random.default_rng(4)
model = TextCNN(len(vocab) + 1)
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.tensor(rng.normal(0, 0.3, size=tuple(p.shape)), dtype=torch.float32))
print(model)
opt = torch.optim.Adam(model.parameters(), lr=0.05)
model.eval()  # dropout off so both libraries compute the same steps
for epoch in range(10):
    loss = F.cross_entropy(model(X), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if epoch % 2 == 0:
        print(epoch, round(loss.item(), 4))
with torch.no_grad():
    probs = F.softmax(model(X), dim=1)
print([round(p, 3) for p in probs[:, 1].tolist()])
print("accuracy", (probs.argmax(1) == y).float().mean().item())
