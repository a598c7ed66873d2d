"""A convolutional regressor mixing normalisations: Conv2d + BatchNorm2d (without conv bias),
Conv2d + GroupNorm, AvgPool2d and a linear head; trained for a few SGD steps, then BatchNorm2d's
running statistics, eval-mode outputs and the state_dict layout printed."""
import numpy as np
import torch
import torch.nn as nn

rng = np.random.default_rng(43)
X = torch.tensor(rng.normal(0.5, 1.0, size=(6, 2, 6, 6)), dtype=torch.float32)
y = torch.tensor(X.numpy().mean(axis=(1, 2, 3))[:, None] * 2.0)

model = nn.Sequential(
    nn.Conv2d(2, 4, 3, padding=1, bias=False),
    nn.BatchNorm2d(4),
    nn.ReLU(),
    nn.Conv2d(4, 4, 3, padding=1),
    nn.GroupNorm(2, 4),
    nn.ReLU(),
    nn.AvgPool2d(2),
    nn.Flatten(),
    nn.Linear(36, 1),
)
with torch.no_grad():
    for name, p in model.named_parameters():
        if name.startswith(("1.", "4.")):
            continue  # the norms keep their initial weight 1 and bias 0
        p.copy_(torch.tensor(rng.normal(0, 0.3, size=tuple(p.shape)), dtype=torch.float32))
print(model)
print(list(model.state_dict().keys()))
opt = torch.optim.SGD(model.parameters(), lr=0.02)
for step in range(8):
    loss = nn.functional.mse_loss(model(X), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(step, round(loss.item(), 4))
bn = model[1]
print([round(v, 4) for v in bn.running_mean.tolist()], [round(v, 4) for v in bn.running_var.tolist()])
print(int(bn.num_batches_tracked))
print("group norm weight", [round(v, 4) for v in model[4].weight.tolist()])
model.eval()
with torch.no_grad():
    print([round(v, 4) for v in model(X).flatten().tolist()])
