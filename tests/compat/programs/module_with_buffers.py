"""A custom Module with a buffer: running statistics updated in place, saved in the state dict."""
import numpy as np
import torch
import torch.nn as nn


class RunningNorm(nn.Module):
    def __init__(self, features, momentum=0.1):
        super().__init__()
        self.momentum = momentum
        self.register_buffer("running_mean", torch.zeros(features))
        self.register_buffer("running_var", torch.ones(features))
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))
        self.scale = nn.Parameter(torch.ones(features))

    def forward(self, x):
        if self.training:
            mean, var = x.mean(0), x.var(0)
            with torch.no_grad():
                self.running_mean.mul_(1 - self.momentum).add_(self.momentum * mean)
                self.running_var.mul_(1 - self.momentum).add_(self.momentum * var)
                self.steps += 1
        else:
            mean, var = self.running_mean, self.running_var
        return (x - mean) / torch.sqrt(var + 1e-5) * self.scale


rng = np.random.default_rng(5)
norm = RunningNorm(3)
for _ in range(5):
    norm(torch.tensor(rng.normal(2.0, 3.0, size=(16, 3)), dtype=torch.float32))
print(norm.running_mean.tolist())
print(norm.running_var.tolist())
print(int(norm.steps))
print(list(norm.state_dict().keys()))
print([name for name, _ in norm.named_buffers()], [name for name, _ in norm.named_parameters()])
norm.eval()
out = norm(torch.tensor([[2.0, 2.0, 2.0]]))
print(out.tolist())
print(norm)
