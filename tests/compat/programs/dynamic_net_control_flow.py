"""A dynamic network: the forward pass picks, per call, how many times to reuse a middle layer
(the count drawn up front with NumPy, as random.randint would be), so the graph changes every
iteration; a recursive tree-like module and an if/else on the data's own values join it."""

import numpy as np
import torch
import torch.nn as nn


class DynamicNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Parameter(torch.tensor(0.1))
        self.b = nn.Parameter(torch.tensor(-0.2))
        self.c = nn.Parameter(torch.tensor(0.05))
        self.d = nn.Parameter(torch.tensor(-0.1))
        self.e = nn.Parameter(torch.tensor(0.02))

    def forward(self, x, extra_terms):
        y = self.a + self.b * x + self.c * x**2 + self.d * x**3
        for exp in range(4, 4 + extra_terms):
            y = y + self.e * x**exp
        return y

    def string(self):
        return f"y = {self.a.item():.4f} + {self.b.item():.4f} x + {self.c.item():.4f} x^2 + {self.d.item():.4f} x^3 + {self.e.item():.4f} x^4 ? + {self.e.item():.4f} x^5 ?"  # noqa: E501


class Gate(nn.Module):
    """Takes a different branch per sample depending on the sign of a learned score."""

    def __init__(self):
        super().__init__()
        self.score = nn.Linear(3, 1)
        self.left = nn.Linear(3, 2)
        self.right = nn.Linear(3, 2)

    def forward(self, x, depth=0):
        outputs = []
        for row in x:
            branch = self.left if self.score(row).item() > 0 else self.right
            outputs.append(branch(row))
        out = torch.stack(outputs)
        if depth < 1:
            out = out + self.forward(x * 0.5, depth + 1)
        return out


x = torch.linspace(-1.0, 1.0, 200)
y = torch.sin(x * 3)
rng = np.random.default_rng(9)
repeats = rng.integers(0, 3, size=300)
model = DynamicNet()
criterion = nn.MSELoss(reduction="sum")
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
for t in range(300):
    y_pred = model(x, int(repeats[t]))
    loss = criterion(y_pred, y)
    if t % 100 == 99:
        print(t, int(repeats[t]), f"{loss.item():.4f}")
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print(f"Result: {model.string()}")

gate = Gate()
with torch.no_grad():
    for p in gate.parameters():
        p.copy_(torch.tensor(rng.normal(0, 0.5, size=tuple(p.shape)), dtype=torch.float32))
data = torch.tensor(rng.normal(size=(5, 3)), dtype=torch.float32)
out = gate(data)
out.sum().backward()
print(out, gate.left.weight.grad.abs().sum().item() > 0, gate.score.weight.grad)
