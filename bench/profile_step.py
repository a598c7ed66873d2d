"""Where a training step's time goes: Python (cProfile, top functions) and the step time.

python bench/profile_step.py --preset mallmoc --batch 16 --seq 512 --device cuda
"""

import argparse
import cProfile
import os
import pstats
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))

import gradcraft as gc  # noqa: E402
from gradcraft.models import Transformer, preset  # noqa: E402
from gradcraft.optim import AdamW, grad_norm_and_scale  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--preset", default="mallmoc")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=None)
    p.add_argument("--device", default="cuda")
    p.add_argument("--top", type=int, default=30)
    args = p.parse_args()
    model = Transformer(preset(args.preset, seq_len=args.seq)).to(args.device)
    cfg = model.config
    opt = AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    backend = gc.device.get_backend(gc.device.canonical(args.device))
    data = np.random.default_rng(0).integers(0, cfg.vocab_size, size=(args.batch, cfg.seq_len + 1))
    x, y = gc.tensor(data[:, :-1], device=args.device), gc.tensor(data[:, 1:], device=args.device)

    def step():
        _, loss = model(x, y)
        loss.backward()
        opt.step(grad_scale=grad_norm_and_scale(model.parameters(), 1.0))
        opt.zero_grad()
        return loss

    for _ in range(3):
        step().item()
    backend.synchronize()
    t = time.perf_counter()
    for _ in range(5):
        step()
    backend.synchronize()
    print(f"step {1e3 * (time.perf_counter() - t) / 5:.1f} ms (5 steps, no host sync inside)")
    t = time.perf_counter()
    prof = cProfile.Profile()
    prof.enable()
    step()
    prof.disable()
    print(f"python time of one step (profiled): {1e3 * (time.perf_counter() - t):.1f} ms")
    pstats.Stats(prof).sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
