"""`gradcraft bench`: train the same model with gradcraft and with PyTorch baselines, side by side, and
print every side's speed, memory and MFU and the ratios (gradcraft/benchmarks/training.py).

Baselines (--baseline, comma-separated or repeated): eager (explicit attention, AdamW foreach),
sdpa (F.scaled_dot_product_attention, fused AdamW on CUDA), compile (the sdpa model's forward and
loss under torch.compile). Default: all three on CUDA, eager on the CPU."""

from gradcraft.cli.common import non_negative_int, positive_int
from gradcraft.errors import UserError


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "bench",
        help="training speed side by side with PyTorch",
        description="Time training steps of one model in gradcraft and in PyTorch (same weights, batches and "
        "AdamW; PyTorch must be installed) and print ms/step, tokens/s, peak memory, MFU and the "
        "ratios. PyTorch baselines: eager (explicit attention), sdpa (scaled_dot_product_attention, "
        "fused AdamW on CUDA), compile (sdpa under torch.compile).",
    )
    p.add_argument("--preset", default="demo", help="model to train (default: %(default)s); see docs/training.md")
    p.add_argument("--batch", type=positive_int, default=16, help="sequences per step (default: %(default)s)")
    p.add_argument("--seq", type=positive_int, default=None, help="sequence length (default: the preset's context)")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default: %(default)s)")
    p.add_argument(
        "--steps", type=positive_int, default=5, help="timed steps per round and side (default: %(default)s)"
    )
    p.add_argument("--warmup", type=non_negative_int, default=2, help="untimed steps first (default: %(default)s)")
    p.add_argument(
        "--rounds", type=positive_int, default=1, help="alternate the two sides this many times (default: %(default)s)"
    )
    p.add_argument("--threads", type=positive_int, default=None, help="CPU threads for both sides (default: all cores)")
    p.add_argument("--tf32", action="store_true", help="TF32 matrix products on CUDA, both sides (default: off)")
    p.add_argument(
        "--dtype",
        choices=["float32", "bfloat16"],
        default="float32",
        help="bfloat16: mixed precision on both sides (ours as `train --dtype bfloat16`, PyTorch autocast) "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--cuda_graph",
        choices=["on", "off"],
        default="on",
        help="replay our step as a CUDA graph, as `gradcraft train` does (default: %(default)s)",
    )
    p.add_argument(
        "--baseline",
        action="append",
        default=[],
        metavar="eager|sdpa|compile",
        help="PyTorch side(s), comma-separated or repeated (default: all three on CUDA, eager on the "
        "CPU, where torch.compile takes minutes)",
    )
    p.add_argument(
        "--only",
        choices=["gradcraft", "ours", "pytorch", "torch"],
        help="gradcraft (= ours): our side alone; pytorch (= torch): the baselines alone (default: both)",
    )
    p.add_argument("--no_mfu", action="store_true", help="skip the matmul-rate measurement (and MFU)")
    p.set_defaults(func=run)


def _check_torch(device: str):
    try:
        import torch
    except ImportError:
        raise UserError(
            "gradcraft bench compares against PyTorch, which is not installed here; install it "
            "(pip install torch) or run with --only gradcraft"
        ) from None
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(
            f"this PyTorch ({torch.__version__}) cannot use CUDA; install a CUDA build of torch or "
            "run with --only gradcraft"
        )
    return torch


def run(args) -> int:
    import numpy as np

    from gradcraft.device import is_available, parse_device
    from gradcraft.models import Transformer, describe, preset

    device = parse_device(args.device, require_available=False)  # the check below says more
    optional = [v for v in (args.threads, args.seq) if v is not None]
    if min(args.batch, args.steps, args.rounds, *optional) < 1 or args.warmup < 0:
        raise UserError("--batch, --steps, --rounds, --seq and --threads must be positive, --warmup at least 0")
    from gradcraft.benchmarks.training import OURS, parse_baselines, select_sides

    sides = select_sides(args.only, parse_baselines(args.baseline, device))
    torch = _check_torch(device) if sides != [OURS] else None
    if device == "cpu":
        from gradcraft.benchmarks import limit_threads, usable_cores

        threads = args.threads or usable_cores()
        limit_threads(threads)
    elif not is_available("cuda"):
        raise UserError("no usable CUDA device here (CuPy and an NVIDIA GPU are needed); use --device cpu")
    from gradcraft.benchmarks.training import Setup, compare, matmul_flops, report

    cfg = preset(args.preset, **({"seq_len": args.seq} if args.seq else {}))
    setup = Setup(
        device=device,
        batch=args.batch,
        steps=args.steps,
        warmup=args.warmup,
        tf32=args.tf32,
        graph=device.startswith("cuda") and args.cuda_graph == "on",
        dtype=args.dtype,
    )
    print(f"{args.preset}: {describe(Transformer(cfg))}")
    print(
        f"batch {args.batch} x {cfg.seq_len}; {args.dtype}; device {device}"
        + (
            f" ({threads} threads)"
            if device == "cpu"
            else f"; tf32 {'on' if args.tf32 else 'off'}"
            + ("; our step replayed as a CUDA graph" if setup.graph else "")
        )
        + f"; {args.rounds} round(s) of {args.warmup} + {args.steps} steps per side; sides: {', '.join(sides)}"
    )
    if device == "cpu":
        from gradcraft.device import get_backend

        print(f"CPU kernels: {get_backend('cpu').kernel_status()}")
    print(f"numpy {np.__version__}" + (f", torch {torch.__version__}" if torch is not None else ""))
    # The MFU ceiling, measured through PyTorch. --only gradcraft runs without a usable PyTorch: then
    # (no torch, or a CPU-only torch on a GPU machine) there is no MFU, and that is all.
    peak_flops = None
    if not args.no_mfu:
        try:
            peak_flops = matmul_flops(device, args.dtype, args.tf32)
        except (RuntimeError, AssertionError):
            if torch is not None:
                raise
    results = compare(cfg, setup, sides, rounds=args.rounds, peak_flops=peak_flops)
    for line in report(results, setup, peak_flops):
        print(line)
    return 0
