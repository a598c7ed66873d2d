"""GPU time per kernel name over a step of bench/user_gpt.py's GPT (bf16 autocast), for gradcraft or
PyTorch standing in for `torch`, eager or compiled, traced with torch.profiler (CUPTI sees every
kernel of the process, CuPy's and cuBLAS's included). With gradcraft eager, also the engine's kernel
calls per step by op name.

    python dev/profile_user_model.py gradcraft compiled
"""

import collections
import os
import sys

import numpy as np
from torch.profiler import ProfilerActivity, profile

lib, mode = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
real_modules = {name: module for name, module in sys.modules.items() if name.split(".")[0] == "torch"}
from user_model import use_library  # noqa: E402  (`import torch` resolving to either library)

torch = use_library(lib)
import user_gpt  # noqa: E402

sys.modules.update(real_modules)  # (user_gpt holds gradcraft as its `torch`; the profiler needs its own back)

model = user_gpt.GPT(user_gpt.GPTConfig()).to("cuda")
opt = model.configure_optimizers(0.1, 1e-3, (0.9, 0.99), "cuda")
if mode == "compiled":
    model = torch.compile(model)
rng = np.random.default_rng(0)
STEPS = 3


def step():
    x = torch.from_numpy(rng.integers(0, 65, (64, 256))).to("cuda")
    y = torch.from_numpy(rng.integers(0, 65, (64, 256))).to("cuda")
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
        _, loss = model(x, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


for _ in range(6):
    step().item()
counts = collections.Counter()
if lib == "gradcraft":
    from gradcraft.engine import realize

    original = realize._count_host_time

    def count(op, start):
        counts[op] += 1
        original(op, start)

    realize._count_host_time = count
    timer = realize.kernel_host_time()
    timer.__enter__()
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    for _ in range(STEPS):
        loss = step()
    loss.item()
rows = []
for e in prof.key_averages():
    t = getattr(e, "device_time_total", 0) or getattr(e, "cuda_time_total", 0)
    if t:
        rows.append((t / STEPS / 1000, e.count / STEPS, e.key))
rows.sort(reverse=True)
total_ms, kernels = sum(r[0] for r in rows), sum(r[1] for r in rows)
print(f"{lib} {mode}: GPU kernel time {total_ms:.2f} ms/step, {kernels:.0f} kernels/step")
for ms, n, key in rows[:45]:
    print(f"{ms:8.3f} ms {n:6.0f}x  {key[:110]}")
if counts:
    print("engine kernel calls per step:", [(k, v // STEPS) for k, v in counts.most_common(40)])
