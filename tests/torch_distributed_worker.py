"""One rank of tests/test_torch_distributed.py: torch.distributed and DistributedDataParallel, written
as a PyTorch program; argv[1] says whether `torch` is PyTorch or gradcraft. Prints its results as JSON."""

import datetime
import json
import sys

import numpy as np

if sys.argv[1] == "gradcraft":
    import gradcraft as torch
    import gradcraft.distributed as dist
    import gradcraft.nn as nn
    from gradcraft.nn.parallel import DistributedDataParallel as DDP
else:
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

out = {"available": dist.is_available(), "before": dist.is_initialized()}
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
rank, world = dist.get_rank(), dist.get_world_size()
out.update(rank=rank, world=world, after=dist.is_initialized(), backend=str(dist.get_backend()))

t = torch.tensor([1.0 + rank, 2.0 * rank])
dist.all_reduce(t)
out["sum"] = t.tolist()
for name in ("MAX", "MIN", "PRODUCT", "AVG"):
    t = torch.tensor([1.0 + rank, 4.0 - 3 * rank], dtype=torch.float64)
    dist.all_reduce(t, op=getattr(dist.ReduceOp, name))
    out[name] = t.tolist()
b = torch.tensor([rank * 10.0, 5.0 + rank])
dist.broadcast(b, src=1)
out["broadcast"] = b.tolist()
gathered = [torch.zeros(2) for _ in range(world)]
dist.all_gather(gathered, torch.tensor([float(rank), rank + 0.5]))
out["all_gather"] = [g.tolist() for g in gathered]
objects = [None] * world
dist.all_gather_object(objects, {"rank": rank, "name": f"r{rank}"})
out["objects"] = objects
dist.barrier()

# DDP: each rank starts from other weights; rank 0's are broadcast. Each rank has its own shard.
model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
rng = np.random.default_rng(100 + rank)
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.tensor(rng.normal(size=tuple(p.shape)), dtype=torch.float32))
ddp = DDP(model)
out["has_module"] = ddp.module is model
data = np.random.default_rng(7).normal(size=(3, 8, 3)).astype(np.float32)
x = torch.tensor(data[0, rank * 4 : rank * 4 + 4])
y = torch.tensor(data[1, rank * 4 : rank * 4 + 4, :2])
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
out["start"] = [p.detach().numpy().round(6).tolist() for p in model.parameters()]
for step in range(2):
    opt.zero_grad()
    loss = ((ddp(x) - y) ** 2).mean()
    loss.backward()
    out[f"grad{step}"] = [p.grad.numpy().round(6).tolist() for p in model.parameters()]
    opt.step()
opt.zero_grad()
with ddp.no_sync():
    ((ddp(x) - y) ** 2).mean().backward()
out["local"] = [p.grad.numpy().round(6).tolist() for p in model.parameters()]
((ddp(x * 2) - y) ** 2).mean().backward()
out["accumulated"] = [p.grad.numpy().round(6).tolist() for p in model.parameters()]
opt.step()
out["end"] = [p.detach().numpy().round(5).tolist() for p in model.parameters()]
out["state_keys"] = list(ddp.state_dict())
dist.destroy_process_group()
out["destroyed"] = dist.is_initialized()
print(json.dumps(out))
