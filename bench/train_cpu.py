"""CPU training throughput: gradcraft against eager PyTorch on the same small GPT, same threads, one run.

    python bench/train_cpu.py --threads 2                       # demo preset, batch 16 x 128
    python bench/train_cpu.py --threads 2 --breakdown           # also: where our step's time goes, per kernel

Both sides start from the same weights and batches and take the same AdamW steps
(gradcraft/benchmarks/training.py, what `gradcraft bench` runs; its PyTorch side is
gradcraft/benchmarks/torch_reference.py: explicit attention, no torch.compile). The two sides alternate
in rounds (ours, torch, ours, torch, ...) so that a burst of load on the machine hits both; each side's
figure is the median step over all rounds.
Printed: ms/step and tokens/s of each, and the speed ratio = our tokens/s / PyTorch's tokens/s
(1.0 = as fast; above 1 = faster).
"""

import argparse
import collections
import os
import time

import numpy as np


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
    """A function running one of our training steps, as gradcraft.benchmarks.training.run_ours does, on one
    fixed batch."""
    import gradcraft as gc
    from gradcraft.models import Transformer
    from gradcraft.optim import AdamW, grad_norm_and_scale
    from gradcraft.optim.weight_decay import weight_decay_groups

    model = Transformer(cfg)
    model.load_state_dict(weights)
    opt = AdamW(weight_decay_groups(model, 0.1), lr=3e-4, betas=(0.9, 0.95))
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
    from gradcraft.benchmarks import limit_threads

    torch = limit_threads(threads)
    from gradcraft.backend.cpu import native as cpu_native
    from gradcraft.benchmarks.training import Setup, compare, initial_weights, report
    from gradcraft.models import Transformer, describe, preset

    cfg = preset(args.preset, seq_len=args.seq)
    setup = Setup(device="cpu", batch=args.batch, steps=args.steps, warmup=args.warmup)
    print(
        f"{args.preset}: {describe(Transformer(cfg))}; batch {args.batch} x {cfg.seq_len}; {threads} threads "
        f"(torch {torch.get_num_threads()}); {args.rounds} rounds of {args.warmup} + {args.steps} steps per side"
    )
    print(f"CPU kernels: {cpu_native.status()}")
    print("\n".join(report(compare(cfg, setup, rounds=args.rounds))))
    if args.breakdown:
        kernel_breakdown(cfg, initial_weights(cfg), args)


if __name__ == "__main__":
    main()
