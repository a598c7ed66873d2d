"""CPU training throughput: gradcraft against eager PyTorch on the same small GPT, same threads, one run.

    python bench/train_cpu.py --threads 2                       # demo preset, batch 16 x 128
    python bench/train_cpu.py --threads 2 --breakdown           # also: where our step's time goes, per kernel

Both sides start from the same weights and batches and take the same AdamW steps (bench/train_gpt.py's
run_ours / run_torch, whose PyTorch side is bench/torch_reference.py: explicit attention, no
torch.compile). The two sides alternate in rounds (ours, torch, ours, torch, ...) so that a burst of
load on the machine hits both; each side's figure is the median step over all rounds.
Printed: ms/step and tokens/s of each, and the speed ratio = our tokens/s / PyTorch's tokens/s
(1.0 = as fast; above 1 = faster).
"""

import argparse
import collections
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


class _RunnerArgs(argparse.Namespace):
    """The options train_gpt's runners read: ours, and None for any they read that we lack
    (train_gpt.py grows options; this bench runs their defaults)."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return None


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="demo")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--steps", type=int, default=5, help="timed steps per round and side")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps at the start of each round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=None, help="CPU threads for both (default: all cores)")
    p.add_argument("--breakdown", action="store_true", help="print our per-kernel time over one step")
    return p.parse_args()


def our_step(cfg, weights, args):
    """A function running one of our training steps, as train_gpt.run_ours does, on one fixed batch."""
    import gradcraft as gc
    from gradcraft.models import Transformer
    from gradcraft.optim import AdamW, grad_norm_and_scale

    model = Transformer(cfg)
    model.load_state_dict(weights)
    decay = [p for p in model.parameters() if p.ndim >= 2]
    rest = [p for p in model.parameters() if p.ndim < 2]
    opt = AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}], lr=3e-4,
                betas=(0.9, 0.95))
    data = np.random.default_rng(0).integers(0, cfg.vocab_size, size=(args.batch, cfg.seq_len + 1))

    def step():
        _, loss = model(gc.tensor(data[:, :-1]), gc.tensor(data[:, 1:]))
        loss.backward()
        opt.step(grad_scale=grad_norm_and_scale(model.parameters(), 1.0))
        opt.zero_grad()
        return loss.item()
    return step


def kernel_breakdown(cfg, weights, args) -> None:
    """Time every kernel call of one of our training steps (after warmup), summed per kernel name."""
    import gradcraft as gc

    backend = gc.device.get_backend("cpu")
    totals, calls = collections.Counter(), collections.Counter()
    plain_run = backend.run

    def timed_run(op, kernel_args, attrs):
        t0 = time.perf_counter()
        result = plain_run(op, kernel_args, attrs)
        totals[op] += time.perf_counter() - t0
        calls[op] += 1
        return result

    def timed_method(name):
        plain = getattr(backend, name)

        def timed(*a, **k):
            t0 = time.perf_counter()
            result = plain(*a, **k)
            totals[name] += time.perf_counter() - t0
            calls[name] += 1
            return result
        return plain, timed

    step = our_step(cfg, weights, args)
    for _ in range(args.warmup):
        step()  # warm the pool and caches
    backend.run = timed_run
    plain_adamw, backend.adamw_step = timed_method("adamw_step")
    plain_norm, backend.grad_norm = timed_method("grad_norm")
    try:
        t0 = time.perf_counter()
        step()
        step_ms = 1e3 * (time.perf_counter() - t0)
    finally:
        backend.run, backend.adamw_step, backend.grad_norm = plain_run, plain_adamw, plain_norm
    kernel_ms = 1e3 * sum(totals.values())
    print(f"\none step of ours (timers on): {step_ms:.1f} ms; in kernels {kernel_ms:.1f} ms")
    print(f"{'kernel':24s} {'calls':>6s} {'ms':>8s} {'share':>6s}")
    for op, seconds in totals.most_common():
        print(f"{op:24s} {calls[op]:6d} {1e3 * seconds:8.2f} {seconds * 1e3 / kernel_ms:6.1%}")


def main():
    args = parse_args()
    threads = args.threads or len(os.sched_getaffinity(0))
    os.environ["OMP_NUM_THREADS"] = str(threads)
    import torch
    from threadpoolctl import threadpool_limits
    torch.set_num_threads(threads)
    threadpool_limits(threads)
    import gradcraft as gc
    import train_gpt
    from gradcraft.models import Transformer, describe, preset

    args = _RunnerArgs(**vars(args), device="cpu", tf32=False)
    cfg = preset(args.preset, seq_len=args.seq)
    gc.manual_seed(0)
    model = Transformer(cfg)
    weights = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    print(f"{args.preset}: {describe(model)}; batch {args.batch} x {cfg.seq_len}; {threads} threads "
          f"(torch {torch.get_num_threads()}); {args.rounds} rounds of {args.warmup} + {args.steps} steps per side")
    del model
    tokens = args.batch * cfg.seq_len
    times = {"gradcraft": [], "pytorch": []}
    losses = {}
    n = args.warmup + args.steps
    for _ in range(args.rounds):
        for name, run in (("gradcraft", train_gpt.run_ours), ("pytorch", train_gpt.run_torch)):
            step_losses, step_times, _ = run(cfg, weights, args, n)
            times[name] += step_times[args.warmup:]
            losses[name] = step_losses
    print(f"{'':10s} {'ms/step':>9s} {'tokens/s':>10s}  first losses")
    ms = {}
    for name in times:
        ms[name] = 1e3 * float(np.median(times[name]))
        print(f"{name:10s} {ms[name]:9.1f} {tokens / ms[name] * 1e3:10,.0f}  "
              f"{' '.join(f'{v:.4f}' for v in losses[name][:3])}")
    drift = max(abs(a - b) for a, b in zip(losses["gradcraft"][:3], losses["pytorch"][:3]))
    print(f"speed ratio (gradcraft tokens/s / pytorch tokens/s): {ms['pytorch'] / ms['gradcraft']:.2f}x; "
          f"max |loss difference| over the first 3 steps: {drift:.2e}")
    if args.breakdown:
        kernel_breakdown(cfg, weights, args)


if __name__ == "__main__":
    main()
