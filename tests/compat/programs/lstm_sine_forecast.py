"""Sequence regression with nn.LSTM (batch_first): predict the next value of noisy sine waves from
the previous ones, two stacked layers, a linear head on every step; then an autoregressive forecast
feeding predictions back with the carried (h, c) state."""
import numpy as np
import torch
import torch.nn as nn

rng = np.random.default_rng(3)
t = np.arange(0, 13) * 0.4
phases = rng.uniform(0, 2 * np.pi, size=(6, 1))
waves = np.sin(t[None, :] + phases) + rng.normal(0, 0.05, size=(6, 13))
inputs = torch.tensor(waves[:, :-1, None], dtype=torch.float32)
targets = torch.tensor(waves[:, 1:, None], dtype=torch.float32)


class Forecaster(nn.Module):
    def __init__(self, hidden=12):
        super().__init__()
        self.lstm = nn.LSTM(input_size=1, hidden_size=hidden, num_layers=2, batch_first=True)
        self.head = nn.Linear(hidden, 1)

    def forward(self, x, state=None):
        out, state = self.lstm(x, state)
        return self.head(out), state


model = Forecaster()
print(model)
print([(n, tuple(p.shape)) for n, p in model.lstm.named_parameters()][:4])
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.tensor(rng.uniform(-0.3, 0.3, size=tuple(p.shape)), dtype=torch.float32))
opt = torch.optim.Adam(model.parameters(), lr=0.03)
for step in range(9):
    pred, _ = model(inputs)
    loss = nn.functional.mse_loss(pred, targets)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 3 == 0:
        print(f"step {step} mse {loss.item():.5f}")

with torch.no_grad():
    _, (h, c) = model(inputs[:1, :6])
    print("state", tuple(h.shape), tuple(c.shape))
    x = inputs[:1, 6:7]
    forecast = []
    for _ in range(5):
        y, (h, c) = model(x, (h, c))
        forecast.append(round(y.item(), 4))
        x = y
print("forecast", forecast)
print("truth", [round(v, 4) for v in waves[0, 7:12].tolist()])
