"""Picking the device as the current PyTorch tutorials do (torch.accelerator), then training there."""
import numpy as np
import torch
from torch import nn

device = torch.accelerator.current_accelerator().type if torch.accelerator.is_available() else "cpu"
print(f"Using {device} device")
print(torch.accelerator.device_count() >= 0, torch.cuda.is_available() == torch.accelerator.is_available())


class NeuralNetwork(nn.Module):
    def __init__(self):
        super().__init__()
        self.flatten = nn.Flatten()
        self.linear_relu_stack = nn.Sequential(nn.Linear(3 * 3, 8), nn.ReLU(), nn.Linear(8, 2))

    def forward(self, x):
        return self.linear_relu_stack(self.flatten(x))


model = NeuralNetwork().to(device)
rng = np.random.default_rng(11)
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.tensor(rng.normal(0, 0.4, size=tuple(p.shape)), dtype=torch.float32))
X = torch.tensor(rng.normal(size=(6, 3, 3)), dtype=torch.float32, device=device)
y = torch.tensor([0, 1, 1, 0, 1, 0], device=device)
opt = torch.optim.SGD(model.parameters(), lr=0.2)
for step in range(10):
    logits = model(X)
    loss = nn.functional.cross_entropy(logits, y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 3 == 0:
        print(f"loss: {loss.item():>7f}  [{step:>2d}/10]")
pred_probab = nn.Softmax(dim=1)(model(X))
print(f"Predicted class: {pred_probab.argmax(1).tolist()}")
