"""Data-parallel training on several GPUs: gradcraft (`gradcraft train --nproc N`'s step) against
PyTorch DistributedDataParallel, both over NCCL, same model and per-GPU batch, in one run.

    python bench/data_parallel.py --preset mallmoc --batch 16 --seq 512 --nproc 2 --tf32
    python bench/data_parallel.py --preset gpt2-124m --batch 16 --seq 1024 --nproc 2 --bf16   # bf16 mixed precision

For each side, on 1 GPU and on N GPUs: ms/step and tokens/s (all GPUs together), the scaling
(N-GPU tokens/s / 1-GPU tokens/s) and the ratio ours / PyTorch. Ours is the trainer's GradientStep
(micro-batch forward and backward with the gradients' NCCL all-reduces issued bucket by bucket on a
second stream as backward produces them (--bucket_mb of TrainConfig), the global norm) replayed
as a CUDA graph, then AdamW: what `gradcraft train --device cuda --nproc N` runs. PyTorch's side is
gradcraft/benchmarks/torch_reference.py wrapped in DDP (bucketed all-reduce overlapping the backward pass), eager,
with what PyTorch users train with: F.scaled_dot_product_attention, fused AdamW, the vocabulary padded
as ours, torch.autocast(bfloat16) with --bf16.
Both start from the same weights; the first losses of rank 0 are printed for both.
"""

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="mallmoc")
    p.add_argument("--batch", type=int, default=16, help="sequences per GPU and step")
    p.add_argument("--seq", type=int, default=None)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--tf32", action="store_true")
    p.add_argument("--bf16", action="store_true", help="mixed precision: ours compute_dtype, PyTorch autocast")
    return p.parse_args()


def _batches(cfg, args, rank, world, n):
    """Step i's batch for this rank: global batch of world x batch sequences, this rank's rows."""
    rng = np.random.default_rng(0)
    for _ in range(n):
        data = rng.integers(0, cfg.vocab_size, size=(world * args.batch, cfg.seq_len + 1))
        mine = data[rank * args.batch : (rank + 1) * args.batch]
        yield mine[:, :-1], mine[:, 1:]


def ours(group, device, cfg, weights, args):
    import gradcraft as gc
    from gradcraft.backend import cuda as gc_cuda
    from gradcraft.models import Transformer
    from gradcraft.optim import AdamW
    from gradcraft.training.trainer import GradientStep, TrainConfig

    gc_cuda.set_tf32(args.tf32)
    world = group.world if group is not None else 1
    rank = group.rank if group is not None else 0
    model = Transformer(cfg)
    model.load_state_dict(weights)
    model.to(device)
    decay = [p for p in model.parameters() if p.ndim >= 2]
    rest = [p for p in model.parameters() if p.ndim < 2]
    opt = AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}], lr=3e-4, betas=(0.9, 0.95)
    )
    tc = TrainConfig(dataset="", model_dir="", batch_size=args.batch, device=device, nproc=world, cuda_graph="on")
    step = GradientStep(model, opt, tc, 1, cfg.seq_len, gc.bfloat16 if args.bf16 else gc.float32, print, group)
    backend = gc.device.get_backend(device)
    losses, times = [], []
    for x, y in _batches(cfg, args, rank, world, args.warmup + args.steps):
        t0 = time.perf_counter()
        loss, _, stats = step.run([(x, y)])
        opt.step(grad_scale=stats)  # (counts the step and writes the lr: the trainer's order)
        step.discard_gradients()
        backend.synchronize()
        times.append(time.perf_counter() - t0)
        losses.append(loss)
    return losses, times


def torch_side(rank, world, cfg, weights, args, out):
    import torch
    import torch.distributed as dist
    from gradcraft.benchmarks import torch_reference

    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.cuda.set_device(rank)
    if world > 1:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29533")
        dist.init_process_group("nccl", rank=rank, world_size=world)
    device = torch.device("cuda", rank)

    V = cfg.vocab_size  # the vocabulary padded as ours; the padded logits are sliced off before the loss

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.params = torch.nn.ParameterDict(
                {
                    k.replace(".", "/"): torch.nn.Parameter(torch.tensor(torch_reference.pad_vocab(cfg, k, v)))
                    for k, v in weights.items()
                }
            )

        def forward(self, x):
            params = {k.replace("/", "."): v for k, v in self.params.items()}
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.bf16):
                return torch_reference.forward(cfg, params, x, attention="sdpa")[..., :V].float()

    model = Model().to(device)
    net = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank]) if world > 1 else model
    decay = [p for p in model.parameters() if p.ndim >= 2]
    rest = [p for p in model.parameters() if p.ndim < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
        lr=3e-4,
        betas=(0.9, 0.95),
        fused=True,
    )
    losses, times = [], []
    for x, y in _batches(cfg, args, rank, world, args.warmup + args.steps):
        t0 = time.perf_counter()
        logits = net(torch.tensor(x, device=device))
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, cfg.vocab_size), torch.tensor(y, device=device).reshape(-1)
        )
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        value = loss.detach()
        if world > 1:
            dist.all_reduce(value)
            value /= world
        losses.append(value.item())
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    if world > 1:
        dist.destroy_process_group()
    if rank == 0:
        out.put((losses, times))


def run_torch(cfg, weights, args, world):
    import torch.multiprocessing as tmp

    context = tmp.get_context("spawn")
    out = context.Queue()
    tmp.start_processes(torch_side, args=(world, cfg, weights, args, out), nprocs=world, start_method="spawn")
    return out.get()


def main():
    args = parse_args()
    import gradcraft as gc
    from gradcraft.distributed import launch
    from gradcraft.models import Transformer, describe, preset

    cfg = preset(args.preset, **({"seq_len": args.seq} if args.seq else {}))
    gc.manual_seed(0)
    model = Transformer(cfg)
    weights = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    print(
        f"{args.preset}: {describe(model)}; {args.batch} x {cfg.seq_len} per GPU; "
        f"tf32 {'on' if args.tf32 else 'off'}; {'bf16 mixed precision; ' if args.bf16 else ''}"
        f"{args.steps} timed steps after {args.warmup}"
    )
    del model
    results = {}
    for world in (1, args.nproc):
        if world == 1:
            from gradcraft.distributed import TCPGroup

            results[("gradcraft", 1)] = ours(TCPGroup(0, 1, []), "cuda:0", cfg, weights, args)
        else:
            results[("gradcraft", world)] = launch(ours, world, "cuda", cfg, weights, args)
        results[("pytorch", world)] = run_torch(cfg, weights, args, world)
    print(f"{'':10s} {'GPUs':>4s} {'ms/step':>9s} {'tokens/s':>11s} {'scaling':>8s}  first losses (rank 0 / mean)")
    tps = {}
    for (name, world), (losses, times) in results.items():
        ms = 1e3 * float(np.median(times[args.warmup :]))
        tps[name, world] = world * args.batch * cfg.seq_len / ms * 1e3
        scaling = tps[name, world] / tps[name, 1] if (name, 1) in tps else 1.0
        print(
            f"{name:10s} {world:4d} {ms:9.1f} {tps[name, world]:11,.0f} {scaling:8.2f}  "
            f"{' '.join(f'{v:.4f}' for v in losses[:3])}"
        )
    for world in sorted({w for _, w in results}):
        print(
            f"ratio gradcraft/pytorch tokens/s on {world} GPU(s): "
            f"{tps['gradcraft', world] / tps['pytorch', world]:.2f}x"
        )


if __name__ == "__main__":
    main()
