"""Training throughput: gradcraft against PyTorch on the same model, batch and optimizer, in one run.

    python bench/train_gpt.py --preset mallmoc --batch 16 --seq 512 --device cuda --graph          # (a) fp32, TF32 off
    python bench/train_gpt.py --preset mallmoc --batch 16 --seq 512 --device cuda --graph --tf32   # (b) TF32 on
    python bench/train_gpt.py --preset mallmoc --batch 16 --seq 512 --device cuda --graph --bf16   # (c) bf16
    python bench/train_gpt.py --preset demo --batch 16 --seq 128 --device cpu --threads 2          # the CPU table
    python bench/train_gpt.py ... --json results.json && python bench/plot_train.py results.json   # a bar chart

Every side starts from the same weights (ours, copied into PyTorch), sees the same token batches, and
takes the same AdamW steps (lr 3e-4, betas (0.9, 0.95), weight decay 0.1 on matrices, clip 1.0).
The PyTorch baselines (--baseline, repeatable or comma-separated; gradcraft/benchmarks/training.py):

  eager    gradcraft/benchmarks/torch_reference.py with explicit attention (q k^T, mask, softmax, @ v)
           and AdamW(foreach=True): no flash kernels, no torch.compile (the baseline of BENCHMARK.md)
  sdpa     the same model with F.scaled_dot_product_attention (is_causal; sliding windows as a mask;
           GQA by enable_gqa or repeated k/v) and AdamW(fused=True) on CUDA (foreach on the CPU)
  compile  the sdpa model's forward and loss under torch.compile (default mode); compilation happens
           in the first warm-up step, so keep --warmup >= 1

Default: all three on CUDA; eager only on the CPU (torch.compile needs minutes and a C++ compiler
there). bf16 = our compute_dtype against torch.autocast(bfloat16). Prints each side's ms/step,
tokens/s, peak memory and MFU (model FLOPs per token x tokens/s over a bf16 or fp32/TF32 matmul rate
measured through PyTorch at the start), the ratio ours / each baseline in tokens/s, and how far each
side's first losses are from ours (they must agree: the check that all trained the same model).
--json PATH appends this run (its configuration, every side's numbers) to PATH, a file that
bench/plot_train.py draws.
"""

import argparse
import datetime
import json
import os
import platform
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="mallmoc")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=None, help="default: the preset's context")
    p.add_argument("--steps", type=int, default=10, help="timed steps")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    p.add_argument("--rounds", type=int, default=1, help="alternate the sides this many times")
    p.add_argument("--device", default="cuda")
    p.add_argument("--tf32", action="store_true")
    p.add_argument(
        "--bf16", action="store_true", help="mixed precision: bf16 activations and matmuls (PyTorch: autocast)"
    )
    p.add_argument("--threads", type=int, default=None, help="CPU threads for all sides (default: all cores)")
    p.add_argument(
        "--baseline",
        action="append",
        default=[],
        metavar="eager|sdpa|compile",
        help="PyTorch side(s) to time, comma-separated or repeated (default: all three on CUDA, eager on the CPU)",
    )
    p.add_argument(
        "--only",
        choices=["ours", "gradcraft", "torch", "pytorch"],
        default=None,
        help="ours (= gradcraft): our side alone; torch (= pytorch): the baselines alone",
    )
    p.add_argument("--graph", action="store_true", help="ours: capture the whole step as a CUDA graph and replay it")
    p.add_argument("--no_mfu", action="store_true", help="skip the matmul-rate measurement (and MFU)")
    p.add_argument("--json", default=None, metavar="PATH", help="append this run's results to PATH (for plot_train.py)")
    p.add_argument(
        "--label", default=None, help="the run's name in the JSON file and the plot (default: from the flags)"
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override a model config field, e.g. --set dim=96 (repeatable)",
    )
    return p, p.parse_args()


def default_label(args, seq: int) -> str:
    precision = "bf16" if args.bf16 else ("tf32" if args.tf32 else "fp32")
    return f"{args.preset} {precision} {args.batch}x{seq}"


def append_json(path: str, run: dict) -> None:
    """Add `run` to the {"runs": [...]} file at path (a run of the same label is replaced), atomically."""
    from gradcraft.atomic import atomic_file

    runs = []
    if os.path.exists(path):
        with open(path) as f:
            runs = json.load(f).get("runs", [])
    runs = [r for r in runs if r.get("label") != run["label"]] + [run]
    with atomic_file(path) as f:
        f.write(json.dumps({"runs": runs}, indent=1).encode())


def main():
    parser, args = parse_args()
    if args.threads:
        from gradcraft.benchmarks import limit_threads

        limit_threads(args.threads)
    from gradcraft.benchmarks.training import (
        Setup,
        compare,
        flops_per_token,
        matmul_flops,
        parse_baselines,
        report,
        select_sides,
        to_json,
    )
    from gradcraft.errors import UserError
    from gradcraft.models import Transformer, describe, preset

    try:
        sides = select_sides(args.only, parse_baselines(args.baseline, args.device))
    except UserError as e:
        parser.error(str(e))
    overrides = {}
    for item in args.set:
        key, _, value = item.partition("=")
        overrides[key] = type(getattr(preset(args.preset), key))(value) if value not in ("None", "") else None
    cfg = preset(args.preset, seq_len=args.seq, **overrides)
    dtype = "bfloat16" if args.bf16 else "float32"
    setup = Setup(
        device=args.device,
        batch=args.batch,
        steps=args.steps,
        warmup=args.warmup,
        tf32=args.tf32,
        graph=args.graph,
        dtype=dtype,
    )
    print(
        f"{args.preset}: {describe(Transformer(cfg))}; batch {args.batch} x {cfg.seq_len}; device {args.device}; "
        f"tf32 {'on' if args.tf32 else 'off'}; {'bf16 mixed precision; ' if args.bf16 else ''}"
        f"{'CUDA graph replay; ' if args.graph else ''}"
        f"{args.rounds} round(s) of {args.warmup} + {args.steps} steps per side; sides: {', '.join(sides)}"
    )
    if "compile" in sides and args.warmup < 1:
        print("note: --warmup 0 times torch.compile's compilation as a step")
    peak_flops = None if args.no_mfu else matmul_flops(args.device, dtype, args.tf32)
    results = compare(cfg, setup, sides, rounds=args.rounds, peak_flops=peak_flops)
    print("\n".join(report(results, setup, peak_flops)))
    if args.json:
        try:
            import torch

            torch_version = torch.__version__
        except ImportError:
            torch_version = None
        run = to_json(
            results,
            label=args.label or default_label(args, cfg.seq_len),
            preset=args.preset,
            batch=args.batch,
            seq=cfg.seq_len,
            device=args.device,
            dtype=dtype,
            tf32=args.tf32,
            graph=args.graph,
            steps=args.steps,
            warmup=args.warmup,
            rounds=args.rounds,
            overrides=args.set,
            matmul_flops=peak_flops,
            flops_per_token=flops_per_token(cfg),
            torch=torch_version,
            python=platform.python_version(),
            date=datetime.datetime.now().isoformat(timespec="seconds"),
        )
        append_json(args.json, run)
        print(f"results appended to {args.json} as {run['label']!r}")


if __name__ == "__main__":
    main()
