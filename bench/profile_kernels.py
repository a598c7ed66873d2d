"""GPU (or CPU) time per kernel name over one training step, each kernel timed alone (synchronised).

    python bench/profile_kernels.py --preset mallmoc --batch 16 --seq 512 --device cuda [--tf32]

The sum is slower than a real step (no overlap of Python and GPU), but the split shows which kernels
to work on. With --torch, also prints PyTorch's CUDA kernel times for the same step (torch.profiler).
With --cupti, also prints the GPU time of each of our CUDA kernels over one eager step, as the GPU ran
them (torch.profiler's CUPTI tracing sees every kernel of the process, CuPy's and cuBLAS's included).
"""

import argparse
import collections
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import gradcraft as gc  # noqa: E402
from gradcraft.models import Transformer, preset  # noqa: E402
from gradcraft.optim import AdamW, grad_norm_and_scale  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--preset", default="mallmoc")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=None)
    p.add_argument("--device", default="cuda")
    p.add_argument("--tf32", action="store_true")
    p.add_argument("--torch", action="store_true")
    p.add_argument("--cupti", action="store_true", help="our kernels' GPU times, traced with torch.profiler")
    p.add_argument("--bf16", action="store_true", help="mixed precision (ours: compute_dtype; PyTorch: autocast)")
    args = p.parse_args()
    if args.device.startswith("cuda"):
        from gradcraft.backend import cuda as gc_cuda

        gc_cuda.set_tf32(args.tf32)
    model = Transformer(preset(args.preset, seq_len=args.seq)).to(args.device)
    cfg = model.config
    opt = AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    backend = gc.device.get_backend(gc.device.canonical(args.device))
    data = np.random.default_rng(0).integers(0, cfg.vocab_size, size=(args.batch, cfg.seq_len + 1))
    x, y = gc.tensor(data[:, :-1], device=args.device), gc.tensor(data[:, 1:], device=args.device)
    total = collections.Counter()
    count = collections.Counter()
    run = backend.run

    def timed(op, a, attrs):
        backend.synchronize()
        t = time.perf_counter()
        out = run(op, a, attrs)
        backend.synchronize()
        total[op] += time.perf_counter() - t
        count[op] += 1
        return out

    def step():
        _, loss = model(x, y, compute_dtype=gc.bfloat16 if args.bf16 else None)
        loss.backward()
        backend.synchronize()
        t = time.perf_counter()
        opt.step(grad_scale=grad_norm_and_scale(model.parameters(), 1.0))
        backend.synchronize()
        total["(optimizer: norm + adamw)"] += time.perf_counter() - t
        count["(optimizer: norm + adamw)"] += 1
        opt.zero_grad()
        return loss

    step().item()
    total.clear()
    count.clear()
    backend.run = timed
    step().item()
    backend.run = run
    print(f"{'kernel':28s} {'calls':>5s} {'ms':>8s}")
    for op, seconds in total.most_common():
        print(f"{op:28s} {count[op]:5d} {seconds * 1e3:8.2f}")
    print(f"{'sum':28s} {sum(count.values()):5d} {sum(total.values()) * 1e3:8.2f}")

    if args.cupti:
        from torch.profiler import ProfilerActivity, profile

        step().item()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            step().item()
            backend.synchronize()
        print("our CUDA kernels over one eager step (GPU time):")
        print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=30, max_name_column_width=60))

    if args.torch:
        import torch
        from gradcraft.benchmarks import torch_reference
        from torch.profiler import ProfilerActivity, profile

        torch.backends.cuda.matmul.allow_tf32 = args.tf32
        params = {
            k: torch.tensor(v.numpy(), device=args.device, requires_grad=True) for k, v in model.state_dict().items()
        }
        topt = torch.optim.AdamW(list(params.values()), lr=3e-4, foreach=True)
        tx, ty = torch.tensor(data[:, :-1], device=args.device), torch.tensor(data[:, 1:], device=args.device)

        def tstep():
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.bf16):
                logits = torch_reference.forward(cfg, params, tx)
                loss = torch.nn.functional.cross_entropy(logits.reshape(-1, cfg.vocab_size).float(), ty.reshape(-1))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(list(params.values()), 1.0)
            topt.step()
            topt.zero_grad()

        tstep()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            tstep()
            torch.cuda.synchronize()
        print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=25))


if __name__ == "__main__":
    main()
