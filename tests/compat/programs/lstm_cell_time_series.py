"""A time-series model written with two stacked nn.LSTMCell, stepping through the sequence by hand
(as pytorch/examples' time_sequence_prediction does), then predicting future steps from its own
outputs; trained with Adam on double-precision sine waves."""
import numpy as np
import torch
import torch.nn as nn

rng = np.random.default_rng(37)
T = 16
data = np.sin(np.arange(T + 1)[None, :] * 0.4 + rng.uniform(0, 3, size=(4, 1)))
inputs = torch.tensor(data[:, :-1], dtype=torch.float64)
targets = torch.tensor(data[:, 1:], dtype=torch.float64)


class Sequence(nn.Module):
    def __init__(self, hidden=10):
        super().__init__()
        self.hidden = hidden
        self.lstm1 = nn.LSTMCell(1, hidden)
        self.lstm2 = nn.LSTMCell(hidden, hidden)
        self.linear = nn.Linear(hidden, 1)

    def forward(self, x, future=0):
        outputs = []
        h1 = torch.zeros(x.size(0), self.hidden, dtype=torch.float64)
        c1 = torch.zeros(x.size(0), self.hidden, dtype=torch.float64)
        h2 = torch.zeros(x.size(0), self.hidden, dtype=torch.float64)
        c2 = torch.zeros(x.size(0), self.hidden, dtype=torch.float64)
        for step in x.split(1, dim=1):
            h1, c1 = self.lstm1(step, (h1, c1))
            h2, c2 = self.lstm2(h1, (h2, c2))
            output = self.linear(h2)
            outputs.append(output)
        for _ in range(future):
            h1, c1 = self.lstm1(output, (h1, c1))
            h2, c2 = self.lstm2(h1, (h2, c2))
            output = self.linear(h2)
            outputs.append(output)
        return torch.cat(outputs, dim=1)


model = Sequence().double()
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.tensor(rng.uniform(-0.3, 0.3, size=tuple(p.shape))))
print(model)
opt = torch.optim.Adam(model.parameters(), lr=0.05)
criterion = nn.MSELoss()
for i in range(10):
    opt.zero_grad()
    loss = criterion(model(inputs), targets)
    loss.backward()
    opt.step()
    print("step", i, "loss", round(loss.item(), 6))
with torch.no_grad():
    pred = model(inputs[:1], future=4)
print(tuple(pred.shape), [round(v, 4) for v in pred[0, -4:].tolist()])
