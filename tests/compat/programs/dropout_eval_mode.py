"""train()/eval() switch: dropout is the identity in eval mode; flags propagate to children."""
import numpy as np
import torch
import torch.nn as nn

rng = np.random.default_rng(25)
model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(p=0.5), nn.ReLU(), nn.Linear(4, 2))
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.tensor(rng.normal(size=tuple(p.shape)), dtype=torch.float32))
x = torch.tensor(rng.normal(size=(3, 4)), dtype=torch.float32)
print(model.training, all(m.training for m in model.modules()))
model.eval()
print(model.training, any(m.training for m in model.modules()))
with torch.no_grad():
    a = model(x)
    b = model(x)
print(torch.equal(a, b), a.tolist())
model.train()
out = model(x)
print(out.shape, model[1].training)
drop = nn.Dropout(0.0)
print(torch.equal(drop(x), x))
