"""Training throughput: gradcraft against eager PyTorch on the same model, batch and optimizer, in one run.

    python bench/train_gpt.py --preset mallmoc --batch 16 --seq 512 --device cuda            # (a) fp32, TF32 off
    python bench/train_gpt.py --preset mallmoc --batch 16 --seq 512 --device cuda --tf32     # (b) TF32 on
    python bench/train_gpt.py --preset mallmoc --batch 16 --seq 512 --device cuda --bf16     # (c) bf16 mixed precision
    python bench/train_gpt.py --preset demo --batch 16 --seq 128 --device cpu --threads 2    # the CPU table

Both sides start from the same weights (ours, copied into PyTorch), see the same token batches, and
take the same AdamW steps (lr 3e-4, betas (0.9, 0.95), weight decay 0.1 on matrices, clip 1.0).
The PyTorch side is gradcraft/benchmarks/torch_reference.py: explicit attention (q k^T, mask, softmax, @ v), no
flash kernels, no torch.compile. Prints ms/step, tokens/s, peak memory, the ratio ours / PyTorch in
tokens/s, and the first losses of both (they must agree: the check that both trained the same model).
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="mallmoc")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=None, help="default: the preset's context")
    p.add_argument("--steps", type=int, default=10, help="timed steps")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    p.add_argument("--device", default="cuda")
    p.add_argument("--tf32", action="store_true")
    p.add_argument("--bf16", action="store_true", help="mixed precision: bf16 activations and matmuls (PyTorch: autocast)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads for both (default: all cores)")
    p.add_argument("--only", choices=["ours", "torch"], default=None)
    p.add_argument("--graph", action="store_true", help="ours: capture the whole step as a CUDA graph and replay it")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="override a model config field, e.g. --set dim=96 (repeatable)")
    return p.parse_args()


def main():
    args = parse_args()
    if args.threads:
        os.environ["OMP_NUM_THREADS"] = str(args.threads)
        import torch
        torch.set_num_threads(args.threads)
        from threadpoolctl import threadpool_limits
        threadpool_limits(args.threads)
    from gradcraft.benchmarks.training import Setup, compare, report
    from gradcraft.models import Transformer, describe, preset

    overrides = {}
    for item in args.set:
        key, _, value = item.partition("=")
        overrides[key] = type(getattr(preset(args.preset), key))(value) if value not in ("None", "") else None
    cfg = preset(args.preset, seq_len=args.seq, **overrides)
    setup = Setup(device=args.device, batch=args.batch, steps=args.steps, warmup=args.warmup, tf32=args.tf32,
                  graph=args.graph, dtype="bfloat16" if args.bf16 else "float32")
    print(f"{args.preset}: {describe(Transformer(cfg))}; batch {args.batch} x {cfg.seq_len}; device {args.device}; "
          f"tf32 {'on' if args.tf32 else 'off'}; {'bf16 mixed precision; ' if args.bf16 else ''}"
          f"{'CUDA graph replay; ' if args.graph else ''}"
          f"{args.steps} timed steps after {args.warmup}")
    sides = [s for s in ("gradcraft", "pytorch") if not args.only or s.startswith(args.only[:5])]
    print("\n".join(report(compare(cfg, setup, sides))))


if __name__ == "__main__":
    main()
