"""Building a tensor by index assignment inside the graph, and differentiating through it."""
import numpy as np
import torch

rng = np.random.default_rng(29)
params = torch.tensor(rng.normal(size=4), requires_grad=True)
matrix = torch.zeros(3, 3, dtype=torch.float64)
matrix[0, 0] = params[0]
matrix[1, 1:] = params[1:3]
matrix[2] = params[3] * 2
matrix[:, 0] += 1.0
print(matrix.requires_grad, matrix.tolist())
loss = (matrix * matrix).sum() + matrix[1].prod()
loss.backward()
print(params.grad.tolist())
buf = torch.zeros(5, dtype=torch.float64)
buf[torch.tensor([4, 0])] = params[:2] * 3
buf[buf > 0] = 0.0
print(buf.tolist())
