"""Why does a schedule not replay? Runs bench/user_gpt.py's model compiled for a few steps and prints,
for consecutive schedules of the same length, the first node whose key differs (engine/plans.py)."""

import importlib
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
import gradcraft as torch  # noqa: E402

sys.modules["torch"] = torch
for sub in ("nn", "nn.functional", "optim", "nn.utils"):
    sys.modules[f"torch.{sub}"] = importlib.import_module(f"gradcraft.{sub}")
import user_gpt  # noqa: E402

from gradcraft.engine import plans  # noqa: E402

device = sys.argv[1] if len(sys.argv) > 1 else "cuda"
cfg = user_gpt.GPTConfig(n_layer=1, custom="custom" in sys.argv)
model = user_gpt.GPT(cfg).to(device)
opt = model.configure_optimizers(0.1, 1e-3, (0.9, 0.99), device)
compiled = torch.compile(model)
keys = []
original = plans._key


def spy(*args):
    result = original(*args)
    keys.append(result[0])
    return result


plans._key = spy
rng = np.random.default_rng(0)
from gradcraft.engine.realize import kernel_host_time  # noqa: E402

for i in range(4):
    timer = kernel_host_time()
    ops = timer.__enter__()
    x = torch.from_numpy(rng.integers(0, 65, (4, 256))).to(device)
    y = torch.from_numpy(rng.integers(0, 65, (4, 256))).to(device)
    _, loss = compiled(x, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    timer.__exit__(None, None, None)
    print(i, plans.stats, [len(k[1]) for k in keys[-4:]])
print("eager kernel ops in the last step:", sorted(ops))
by_length: dict = {}
for key in keys:
    by_length.setdefault(len(key[1]), []).append(key)
for n, group in by_length.items():
    for a, b in zip(group, group[1:]):
        if a != b:
            print(f"schedule of {n}: leaves equal {a[2] == b[2]}, kept equal {a[3] == b[3]}")
            for i, (na, nb) in enumerate(zip(a[1], b[1])):
                if na != nb:
                    print(" node", i, na, "\n      ", nb)
                    break
            break
