"""An MLP with BatchNorm1d between its layers: training mode normalises with the batch statistics
and updates the running ones (momentum 0.1, and a cumulative average with momentum=None), eval mode
uses the running statistics; the buffers and the state_dict keys printed."""
import numpy as np
import torch
import torch.nn as nn

rng = np.random.default_rng(5)
X = torch.tensor(rng.normal(2.0, 3.0, size=(16, 4)), dtype=torch.float32)
y = torch.tensor((rng.normal(size=(16, 1)) > 0).astype(np.float32))

model = nn.Sequential(
    nn.Linear(4, 8, bias=False),  # a bias before batch norm is cancelled by it
    nn.BatchNorm1d(8),
    nn.ReLU(),
    nn.Linear(8, 1),
)
cumulative = nn.BatchNorm1d(4, momentum=None, affine=False)
with torch.no_grad():
    for name, p in model.named_parameters():
        p.copy_(torch.tensor(rng.normal(0, 0.5, size=tuple(p.shape)), dtype=torch.float32))
print(list(model.state_dict().keys()))
print(model[1])
opt = torch.optim.Adam(model.parameters(), lr=0.02)
loss_fn = nn.BCEWithLogitsLoss()
for step in range(8):
    batch = X[(step % 2) * 8:(step % 2) * 8 + 8]
    target = y[(step % 2) * 8:(step % 2) * 8 + 8]
    loss = loss_fn(model(batch), target)
    opt.zero_grad()
    loss.backward()
    opt.step()
    cumulative(batch)
    print(step, round(loss.item(), 4))
bn = model[1]
print("running_mean", [round(v, 4) for v in bn.running_mean.tolist()])
print("running_var", [round(v, 4) for v in bn.running_var.tolist()])
print("batches", bn.num_batches_tracked.item(), cumulative.num_batches_tracked.item())
print("cumulative mean", [round(v, 4) for v in cumulative.running_mean.tolist()])
print("true mean", [round(v, 4) for v in X.mean(0).tolist()])
model.eval()
with torch.no_grad():
    print("eval", [round(v, 4) for v in model(X[:4]).flatten().tolist()])
    print("same in eval", torch.allclose(model(X[:2]), model(X[:4])[:2]))
model.train()
print("train differs", not torch.allclose(model(X[:2]), model(X[:4])[:2]))
