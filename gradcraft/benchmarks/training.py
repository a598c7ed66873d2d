"""Training throughput: gradcraft against eager PyTorch on the same model, batches and optimizer.

Both sides start from the same weights (ours, copied into PyTorch), see the same token batches and
take the same AdamW steps (lr 3e-4, betas (0.9, 0.95), weight decay 0.1 on matrices, global-norm
clipping 1.0). The PyTorch side is torch_reference.py: explicit attention (q k^T, mask, softmax,
@ v), no flash kernels, no torch.compile. With dtype bfloat16 both run mixed precision over float32
weights: ours with the model's compute_dtype (gradcraft train --dtype bfloat16), PyTorch under
torch.autocast(bfloat16) (its AMP recipe). The first losses of both must agree: the check that both
trained the same model.
"""

import time
from dataclasses import dataclass

import numpy as np


@dataclass
class Setup:
    device: str = "cpu"
    batch: int = 16  # sequences per step
    steps: int = 10  # timed steps
    warmup: int = 3  # untimed steps first
    tf32: bool = False  # TF32 matrix products on CUDA (both sides)
    graph: bool = False  # ours: replay the step as a CUDA graph
    dtype: str = "float32"  # or bfloat16: mixed precision (ours: compute_dtype; PyTorch: autocast)


def batches(vocab: int, batch: int, seq: int, n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        data = rng.integers(0, vocab, size=(batch, seq + 1))
        yield data[:, :-1], data[:, 1:]


def initial_weights(cfg) -> dict:
    """Our freshly initialized weights (seed 0) as NumPy arrays: both sides start from these."""
    import gradcraft as gc
    from gradcraft.models import Transformer
    gc.manual_seed(0)
    return {k: v.numpy().copy() for k, v in Transformer(cfg).state_dict().items()}


def run_ours(cfg, weights, setup: Setup, n_steps: int):
    """(losses, seconds per step, peak bytes) of n_steps of our training steps."""
    import gradcraft as gc
    from gradcraft.engine.capture import CapturedStep
    from gradcraft.models import Transformer
    from gradcraft.optim import AdamW, grad_norm_and_scale

    if setup.device.startswith("cuda"):
        from gradcraft.backend import cuda as gc_cuda
        gc_cuda.set_tf32(setup.tf32)
    model = Transformer(cfg)
    model.load_state_dict(weights)
    model.to(setup.device)
    decay = [p for p in model.parameters() if p.ndim >= 2]
    rest = [p for p in model.parameters() if p.ndim < 2]
    opt = AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}], lr=3e-4,
                betas=(0.9, 0.95))
    device = gc.device.canonical(setup.device)
    backend = gc.device.get_backend(device)
    # Inputs live in fixed buffers that each step overwrites (what graph replay needs).
    x_in = gc.zeros(setup.batch, cfg.seq_len, dtype=gc.int64, device=device).realize()
    y_in = gc.zeros(setup.batch, cfg.seq_len, dtype=gc.int64, device=device).realize()

    compute_dtype = gc.bfloat16 if setup.dtype == "bfloat16" else None

    def step():
        _, loss = model(x_in, y_in, compute_dtype=compute_dtype)
        loss.backward()
        opt.step(grad_scale=grad_norm_and_scale(model.parameters(), 1.0), prepare=False)
        opt.zero_grad()
        return loss

    run_step = CapturedStep(step, device) if setup.graph else step
    losses, times, peak = [], [], 0
    for x, y in batches(cfg.vocab_size, setup.batch, cfg.seq_len, n_steps):
        t0 = time.perf_counter()
        backend.write(x_in._buf, x)
        backend.write(y_in._buf, y)
        opt.prepare()
        loss = run_step()
        losses.append(loss.item())
        backend.synchronize()
        times.append(time.perf_counter() - t0)
        # the device memory our process holds (CuPy's pools, a captured graph's included), at its most
        peak = max(peak, backend.memory_info()["reserved_bytes"])
    return losses, times, peak


def run_torch(cfg, weights, setup: Setup, n_steps: int):
    """The same steps in eager PyTorch: (losses, seconds per step, peak bytes or None)."""
    import torch

    from gradcraft.benchmarks import torch_reference

    torch.backends.cuda.matmul.allow_tf32 = setup.tf32
    torch.backends.cudnn.allow_tf32 = setup.tf32
    device = torch.device(setup.device)
    params = {k: torch.tensor(v, device=device, requires_grad=True) for k, v in weights.items()}
    decay = [p for p in params.values() if p.ndim >= 2]
    rest = [p for p in params.values() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), foreach=True)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    losses, times = [], []
    for x, y in batches(cfg.vocab_size, setup.batch, cfg.seq_len, n_steps):
        t0 = time.perf_counter()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=setup.dtype == "bfloat16"):
            logits, aux = torch_reference.forward(cfg, params, torch.tensor(x, device=device), with_aux=True)
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, cfg.vocab_size).float(),
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


RUNNERS = {"gradcraft": run_ours, "pytorch": run_torch}


def compare(cfg, setup: Setup, sides=("gradcraft", "pytorch"), rounds: int = 1) -> dict:
    """Run the sides in turn (`rounds` times, alternating, so that a burst of load on the machine hits
    both) and return {side: (median ms/step, tokens/s, peak bytes, first losses)}."""
    weights = initial_weights(cfg)
    times, results = {side: [] for side in sides}, {}
    for _ in range(rounds):
        for side in sides:
            losses, step_times, peak = RUNNERS[side](cfg, weights, setup, setup.warmup + setup.steps)
            times[side] += step_times[setup.warmup:]
            results[side] = (losses, peak)
    tokens = setup.batch * cfg.seq_len
    out = {}
    for side in sides:
        ms = 1e3 * float(np.median(times[side]))
        losses, peak = results[side]
        out[side] = (ms, tokens / ms * 1e3, peak, losses)
    return out


def report(results: dict) -> list[str]:
    """Table lines: ms/step, tokens/s, peak memory and first losses per side, then the ratio."""
    lines = [f"{'':10s} {'ms/step':>9s} {'tokens/s':>11s} {'peak MiB':>9s}  first losses"]
    for name, (ms, tps, peak, losses) in results.items():
        peak_s = f"{peak / 2**20:9.0f}" if peak else f"{'-':>9s}"
        lines.append(f"{name:10s} {ms:9.1f} {tps:11,.0f} {peak_s}  {' '.join(f'{v:.4f}' for v in losses[:3])}")
    if len(results) == 2:
        ours, ref = results["gradcraft"], results["pytorch"]
        lines.append(f"speed ratio (gradcraft tokens/s / pytorch tokens/s): {ours[1] / ref[1]:.2f}x"
                     + (f"; peak memory ratio {ours[2] / ref[2]:.2f}" if ours[2] and ref[2] else ""))
        drift = max(abs(a - b) for a, b in zip(ours[3][:3], ref[3][:3]))
        lines.append(f"max |loss difference| over the first 3 steps: {drift:.2e}")
    return lines
