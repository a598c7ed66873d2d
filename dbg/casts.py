import collections, sys
import numpy as np
import gradcraft as gc
from gradcraft.backend.cuda import launch as L
from gradcraft.models import Transformer, preset
from gradcraft.optim import AdamW, grad_norm_and_scale
model = Transformer(preset("mallmoc", seq_len=512)).to("cuda")
opt = AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
backend = gc.device.get_backend("cuda:0")
data = np.random.default_rng(0).integers(0, 8192, size=(16, 513))
x, y = gc.tensor(data[:, :-1], device="cuda"), gc.tensor(data[:, 1:], device="cuda")
cur = ["-"]
stats = collections.Counter(); elems = collections.Counter()
wide0, finish0 = L.wide, L.finish
def wide(a):
    if a.dtype in L.HALF:
        stats[(cur[0], "wide", str(a.dtype))] += 1; elems[(cur[0], "wide", str(a.dtype))] += a.size
    return wide0(a)
def finish(r, dtype):
    if r.dtype != dtype:
        stats[(cur[0], "finish", str(dtype))] += 1; elems[(cur[0], "finish", str(dtype))] += r.size
    return finish0(r, dtype)
L.wide, L.finish = wide, finish
import gradcraft.backend.cuda.backend as B, gradcraft.backend.cuda.nn as N
for mod in (B, N):
    if hasattr(mod, "L"): pass
run0 = backend.run
shapes = collections.Counter()
def run(op, args, attrs):
    cur[0] = op
    if op in ("add", "sum", "cast", "mul", "contiguous", "put_slices"):
        shapes[(op, tuple((tuple(a.shape), str(a.dtype), a.flags.c_contiguous) if hasattr(a, "shape") else a for a in args), str(sorted(attrs.items()))[:60])] += 1
    try:
        return run0(op, args, attrs)
    finally:
        cur[0] = "-"
backend.run = run
def step():
    _, loss = model(x, y, compute_dtype=gc.bfloat16)
    loss.backward()
    opt.step(grad_scale=grad_norm_and_scale(model.parameters(), 1.0))
    opt.zero_grad()
    return loss
step().item(); stats.clear(); elems.clear(); shapes.clear()
step().item()
for k, v in sorted(stats.items(), key=lambda kv: -elems[kv[0]]): print(f"{v:5d} calls {elems[k]/1e6:9.1f} M elems  {k}")
print("---- op shapes")
for k, v in sorted(shapes.items(), key=lambda kv: -kv[1])[:40]: print(v, k)
