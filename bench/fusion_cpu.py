"""Elementwise fusion on the CPU (generated C kernels, gradcraft/backend/cpu/native/fused.py): fused
against unfused (what GRADCRAFT_FUSION=0 gives), in one process, the two alternating step by step
(each first in turn) so that a burst of load on the machine hits both.

    python bench/fusion_cpu.py                      # every case
    python bench/fusion_cpu.py --only chain --repeat 20

Cases:
- chain: forward and backward of a user's own elementwise work on a (rows, width) float32 tensor: the
  issue's activations `x * sigmoid(1.702 x)`, `relu(x)^2`, `30 tanh(x / 30)` and a hand-written
  RMSNorm, summed;
- gpt, custom: a training step (forward, backward, clip_grad_norm_, AdamW, zero_grad) of the GPT
  written as plain PyTorch code (bench/user_gpt.py, gradcraft standing in for torch), at a CPU size;
  `custom` swaps in squared ReLU, QK RMSNorm written out, soft-capped logits and rotary embeddings;
- demo: the training step of `gradcraft train`'s demo preset (bench/train_cpu.py's step).

Printed per case: median (and minimum) ms of each side, the ratio unfused / fused (above 1: fusion is
faster), the kernels per step of each side, the median CPU time of the process per step (all its
threads: less sensitive than wall time to other jobs on a shared machine) and its ratio, and whether
the two sides' losses (or outputs) agree.
"""

import argparse
import importlib
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", default="chain,gpt,custom,demo")
    p.add_argument("--repeat", type=int, default=10, help="timed steps per side")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per side (kernels compile here)")
    p.add_argument("--rows", type=int, default=2048, help="chain: rows")
    p.add_argument("--width", type=int, default=1024, help="chain: width")
    p.add_argument("--batch", type=int, default=8, help="gpt/custom/demo: batch")
    p.add_argument("--seq", type=int, default=128, help="gpt/custom/demo: sequence length")
    p.add_argument("--aa", action="store_true", help="fusion on for both sides (the harness's noise floor)")
    return p.parse_args()


def chain_case(gc, args):
    import gradcraft.nn.functional as F

    rng = np.random.default_rng(0)
    x = gc.tensor(rng.normal(size=(args.rows, args.width)).astype(np.float32)).requires_grad_()
    w = gc.tensor(rng.normal(size=(args.width,)).astype(np.float32)).requires_grad_()
    g = gc.tensor(rng.normal(size=(args.rows, args.width)).astype(np.float32))

    def step():
        a = x * gc.sigmoid(1.702 * x)
        b = F.relu(x).square()
        c = 30 * gc.tanh(x / 30)
        d = x * gc.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
        y = a + b + c + d
        y.backward(g)
        out = x.grad.numpy()[:, ::97].copy()  # (a sample of the gradient: the two sides compared)
        x.grad = w.grad = None
        return out

    return step


def gpt_case(gc, args, custom):
    for name in ("nn", "nn.functional", "optim", "nn.utils"):
        sys.modules[f"torch.{name}"] = importlib.import_module(f"gradcraft.{name}")
    sys.modules["torch"] = gc
    import user_gpt

    gc.manual_seed(0)
    config = user_gpt.GPTConfig(block_size=args.seq, n_layer=2, n_head=4, n_embd=128, dropout=0.0, custom=custom)
    model = user_gpt.GPT(config)
    opt = model.configure_optimizers(0.1, 1e-3, (0.9, 0.99), "cpu")
    data = np.random.default_rng(0).integers(0, config.vocab_size, size=(args.batch, args.seq + 1))

    def step():
        x, y = gc.from_numpy(data[:, :-1].astype(np.int64)), gc.from_numpy(data[:, 1:].astype(np.int64))
        _, loss = model(x, y)
        loss.backward()
        gc.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    return step


def demo_case(gc, args):
    import train_cpu

    from gradcraft.benchmarks.training import initial_weights
    from gradcraft.models import preset

    cfg = preset("demo", seq_len=args.seq)
    return train_cpu.our_step(cfg, initial_weights(cfg), args)


def measure(name, make, args):
    from gradcraft.engine import fusion, realize

    enabled, steps, kernels = fusion.ENABLED, {}, {}
    times, cpu, results = ({True: [], False: []} for _ in range(3))
    for fused in (True, False):
        fusion.ENABLED = fused or args.aa
        steps[fused] = make()  # (each side its own model and optimizer, from the same seed)
        for _ in range(args.warmup):
            steps[fused]()
    for r in range(args.repeat):
        for fused in (True, False) if r % 2 == 0 else (False, True):  # (each side first in turn)
            fusion.ENABLED = fused or args.aa
            before = realize.launches["kernels"]
            t0, c0 = time.perf_counter(), time.process_time()
            results[fused].append(steps[fused]())
            times[fused].append(time.perf_counter() - t0)
            cpu[fused].append(time.process_time() - c0)
            kernels[fused] = realize.launches["kernels"] - before
    fusion.ENABLED = enabled
    on, off = (1e3 * float(np.median(times[s])) for s in (True, False))
    on_min, off_min = (1e3 * min(times[s]) for s in (True, False))
    on_cpu, off_cpu = (1e3 * float(np.median(cpu[s])) for s in (True, False))
    a, b = np.array(results[True]), np.array(results[False])
    agree = "bitwise" if np.array_equal(a, b) else f"max rel diff {np.max(np.abs(a - b) / np.abs(b).clip(1e-30)):.1e}"
    print(
        f"{name:8s} fused {on:7.1f} ms (min {on_min:7.1f}, {kernels[True]} kernels)  unfused {off:7.1f} ms "
        f"(min {off_min:7.1f}, {kernels[False]} kernels)  ratio {off / on:4.2f}x (min {off_min / on_min:4.2f}x)  "
        f"CPU time {on_cpu:.1f} / {off_cpu:.1f} ms: {off_cpu / on_cpu:4.2f}x  results: {agree}",
        flush=True,
    )


CASES = ("chain", "gpt", "custom", "demo")


def main():
    args = parse_args()
    unknown = [name for name in args.only.split(",") if name not in CASES]
    if unknown:
        print(f"error: --only takes cases of {', '.join(CASES)}; not {', '.join(unknown)}", file=sys.stderr)
        sys.exit(2)
    import gradcraft as gc
    from gradcraft.backend.cpu.native import fused
    from gradcraft.backend.cpu.threads import num_threads

    print(f"CPU fusion: {'C kernels' if fused.available() else 'off (no compiler)'}; {num_threads()} threads")
    cases = {
        "chain": lambda: chain_case(gc, args),
        "gpt": lambda: gpt_case(gc, args, custom=False),
        "custom": lambda: gpt_case(gc, args, custom=True),
        "demo": lambda: demo_case(gc, args),
    }
    for name in args.only.split(","):
        measure(name, cases[name], args)


if __name__ == "__main__":
    main()
