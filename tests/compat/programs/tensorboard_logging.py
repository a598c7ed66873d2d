"""Logging a training run with torch.utils.tensorboard's SummaryWriter (scalars, a group of scalars,
a histogram of the weights), then reading the event files back with tensorboard's loader."""
import glob
import os
import tempfile

import numpy as np
import torch
import torch.nn as nn
from torch.utils.tensorboard import SummaryWriter
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

rng = np.random.default_rng(23)
X = torch.tensor(rng.normal(size=(20, 3)), dtype=torch.float32)
Y = torch.tensor(rng.normal(size=(20, 1)), dtype=torch.float32)
model = nn.Linear(3, 1)
with torch.no_grad():
    model.weight.copy_(torch.tensor([[0.3, -0.2, 0.5]]))
    model.bias.fill_(0.1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

folder = tempfile.mkdtemp()
writer = SummaryWriter(log_dir=folder)
for step in range(5):
    optimizer.zero_grad()
    loss = ((model(X) - Y) ** 2).mean()
    loss.backward()
    optimizer.step()
    writer.add_scalar("train/loss", loss, step)
    writer.add_scalars("metrics", {"loss": loss.item(), "weight_norm": model.weight.norm().item()}, step)
writer.add_histogram("weight", model.weight, 5)
writer.close()

for sub in ("", "metrics_loss", "metrics_weight_norm"):
    files = sorted(glob.glob(os.path.join(folder, sub, "events.out.tfevents.*")))
    for path in files:
        for event in EventFileLoader(path).Load():
            for value in event.summary.value:
                kind = value.WhichOneof("value")
                shown = round(value.simple_value, 5) if kind == "simple_value" else (value.histo.num, round(value.histo.sum, 5))
                print(sub or ".", event.step, value.tag, shown)
