"""Training throughput: gradcraft against eager PyTorch on the same model, batch and optimizer, in one run.

    python bench/train_gpt.py --preset mallmoc --batch 16 --seq 512 --device cuda            # (a) fp32, TF32 off
    python bench/train_gpt.py --preset mallmoc --batch 16 --seq 512 --device cuda --tf32     # (b) TF32 on
    python bench/train_gpt.py --preset demo --batch 16 --seq 128 --device cpu --threads 2    # the CPU table

Both sides start from the same weights (ours, copied into PyTorch), see the same token batches, and
take the same AdamW steps (lr 3e-4, betas (0.9, 0.95), weight decay 0.1 on matrices, clip 1.0).
The PyTorch side is bench/torch_reference.py: explicit attention (q k^T, mask, softmax, @ v), no
flash kernels, no torch.compile. Prints ms/step, tokens/s, peak memory, the ratio ours / PyTorch in
tokens/s, and the first losses of both (they must agree: the check that both trained the same model).
"""

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="mallmoc")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=None, help="default: the preset's context")
    p.add_argument("--steps", type=int, default=10, help="timed steps")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    p.add_argument("--device", default="cuda")
    p.add_argument("--tf32", action="store_true")
    p.add_argument("--threads", type=int, default=None, help="CPU threads for both (default: all cores)")
    p.add_argument("--only", choices=["ours", "torch"], default=None)
    p.add_argument("--graph", action="store_true", help="ours: capture the whole step as a CUDA graph and replay it")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="override a model config field, e.g. --set dim=96 (repeatable)")
    return p.parse_args()


def batches(vocab, batch, seq, n, seed=0):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        data = rng.integers(0, vocab, size=(batch, seq + 1))
        yield data[:, :-1], data[:, 1:]


def run_ours(cfg, weights, args, n_steps):
    import gradcraft as gc
    from gradcraft.models import Transformer
    from gradcraft.optim import AdamW, grad_norm_and_scale

    if args.device.startswith("cuda"):
        from gradcraft.backend import cuda as gc_cuda
        gc_cuda.set_tf32(args.tf32)
    model = Transformer(cfg)
    model.load_state_dict(weights)
    model.to(args.device)
    decay = [p for p in model.parameters() if p.ndim >= 2]
    rest = [p for p in model.parameters() if p.ndim < 2]
    opt = AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}], lr=3e-4,
                betas=(0.9, 0.95))
    from gradcraft.engine.capture import CapturedStep
    backend = gc.device.get_backend(gc.device.canonical(args.device))
    # Inputs live in fixed buffers that each step overwrites (what graph replay needs).
    x_in = gc.zeros(args.batch, cfg.seq_len, dtype=gc.int64, device=args.device).realize()
    y_in = gc.zeros(args.batch, cfg.seq_len, dtype=gc.int64, device=args.device).realize()

    def step():
        _, loss = model(x_in, y_in)
        loss.backward()
        opt.step(grad_scale=grad_norm_and_scale(model.parameters(), 1.0), prepare=False)
        opt.zero_grad()
        return loss

    run_step = CapturedStep(step, args.device) if args.graph else step
    losses, times = [], []
    for x, y in batches(cfg.vocab_size, args.batch, cfg.seq_len, n_steps):
        t0 = time.perf_counter()
        backend.write(x_in._buf, x)
        backend.write(y_in._buf, y)
        opt.prepare()
        loss = run_step()
        losses.append(loss.item())
        backend.synchronize()
        times.append(time.perf_counter() - t0)
    peak = None
    if args.device.startswith("cuda"):
        import cupy
        peak = cupy.get_default_memory_pool().total_bytes()
    else:
        peak = gc.memory_stats()["peak_bytes"]
    return losses, times, peak


def run_torch(cfg, weights, args, n_steps):
    import torch
    import torch_reference

    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.backends.cudnn.allow_tf32 = args.tf32
    device = torch.device(args.device)
    params = {k: torch.tensor(v, device=device, requires_grad=True) for k, v in weights.items()}
    decay = [p for p in params.values() if p.ndim >= 2]
    rest = [p for p in params.values() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), foreach=True)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    losses, times = [], []
    for x, y in batches(cfg.vocab_size, args.batch, cfg.seq_len, n_steps):
        t0 = time.perf_counter()
        logits, aux = torch_reference.forward(cfg, params, torch.tensor(x, device=device), with_aux=True)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, cfg.vocab_size),
                                                 torch.tensor(y, device=device).reshape(-1)) + aux
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(params.values()), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    peak = torch.cuda.max_memory_reserved() if device.type == "cuda" else None
    return losses, times, peak


def main():
    args = parse_args()
    if args.threads:
        os.environ["OMP_NUM_THREADS"] = str(args.threads)
        import torch
        torch.set_num_threads(args.threads)
        from threadpoolctl import threadpool_limits
        threadpool_limits(args.threads)
    import gradcraft as gc
    from gradcraft.models import Transformer, describe, preset

    overrides = {}
    for item in args.set:
        key, _, value = item.partition("=")
        overrides[key] = type(getattr(preset(args.preset), key))(value) if value not in ("None", "") else None
    cfg = preset(args.preset, seq_len=args.seq, **overrides)
    gc.manual_seed(0)
    model = Transformer(cfg)
    weights = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    n = args.warmup + args.steps
    tokens = args.batch * cfg.seq_len
    print(f"{args.preset}: {describe(model)}; batch {args.batch} x {cfg.seq_len}; device {args.device}; "
          f"tf32 {'on' if args.tf32 else 'off'}; {'CUDA graph replay; ' if args.graph else ''}"
          f"{args.steps} timed steps after {args.warmup}")
    del model
    results = {}
    for name, fn in (("gradcraft", run_ours), ("pytorch", run_torch)):
        if args.only and not name.startswith(args.only[:5]):
            continue
        losses, times, peak = fn(cfg, weights, args, n)
        ms = 1e3 * float(np.median(times[args.warmup:]))
        results[name] = (ms, tokens / ms * 1e3, peak, losses)
    print(f"{'':10s} {'ms/step':>9s} {'tokens/s':>11s} {'peak MiB':>9s}  first losses")
    for name, (ms, tps, peak, losses) in results.items():
        peak_s = f"{peak / 2**20:9.0f}" if peak else f"{'-':>9s}"
        print(f"{name:10s} {ms:9.1f} {tps:11,.0f} {peak_s}  {' '.join(f'{v:.4f}' for v in losses[:3])}")
    if len(results) == 2:
        ours, ref = results["gradcraft"], results["pytorch"]
        print(f"ratio gradcraft/pytorch tokens/s: {ours[1] / ref[1]:.2f}x"
              + (f"; peak memory ratio {ours[2] / ref[2]:.2f}" if ours[2] and ref[2] else ""))
        drift = max(abs(a - b) for a, b in zip(ours[3][:3], ref[3][:3]))
        print(f"max |loss difference| over the first 3 steps: {drift:.2e}")


if __name__ == "__main__":
    main()
