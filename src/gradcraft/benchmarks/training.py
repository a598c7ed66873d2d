"""Training throughput: gradcraft against PyTorch on the same model, batches and optimizer.

Every side starts from the same weights (ours, copied into PyTorch), sees the same token batches and
takes the same AdamW steps (lr 3e-4, betas (0.9, 0.95), weight decay 0.1 on matrices, global-norm
clipping 1.0). The sides:

  gradcraft  our Transformer and AdamW (the step replayed as a CUDA graph with Setup.graph).
  eager      torch_reference.py with explicit attention (q k^T, mask, softmax, @ v) and
             torch.optim.AdamW(foreach=True): eager PyTorch without its fused kernels.
  sdpa       the same model with F.scaled_dot_product_attention (is_causal; sliding windows as a
             mask; GQA by enable_gqa or repeated k/v) and torch.optim.AdamW(fused=True) on CUDA
             (foreach=True on the CPU): eager PyTorch as people write it today.
  compile    the sdpa side with its forward and loss under torch.compile (default mode); backward
             and optimizer step stay eager (AdamW fused on CUDA).

With dtype bfloat16 every side runs mixed precision over float32 weights: ours with the model's
compute_dtype (gradcraft train --dtype bfloat16), PyTorch under torch.autocast(bfloat16) (its AMP
recipe). The first losses of every side must agree with ours: the check that all trained the same
model. MFU (model FLOPs utilisation) = tokens/s * Transformer.flops_per_token() (active parameters
for mixture-of-experts models) / a matmul rate that PyTorch measures on the same device and dtype.
"""

import gc as python_gc
import time
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from gradcraft.errors import UserError

OURS = "gradcraft"
BASELINES = ("eager", "sdpa", "compile")
# what --only accepts: both spellings of each side
ONLY = {"ours": "ours", "gradcraft": "ours", "torch": "torch", "pytorch": "torch"}


@dataclass
class Setup:
    device: str = "cpu"
    batch: int = 16  # sequences per step
    steps: int = 10  # timed steps
    warmup: int = 3  # untimed steps first (torch.compile compiles in the first one)
    tf32: bool = False  # TF32 matrix products on CUDA (all sides)
    graph: bool = False  # ours: replay the step as a CUDA graph
    dtype: str = "float32"  # or bfloat16: mixed precision (ours: compute_dtype; PyTorch: autocast)


@dataclass
class SideResult:
    ms: float = 0.0  # median ms per timed step
    tokens_per_s: float = 0.0
    peak_bytes: int | None = None  # device memory held at most (None on the CPU)
    losses: list = field(default_factory=list)  # every step's loss, warm-up included
    first_step_s: float = 0.0  # the first step's seconds (for compile: mostly compilation)
    mfu: float | None = None  # model FLOPs utilisation, against the measured matmul rate
    error: str | None = None  # a PyTorch side that could not run (e.g. torch.compile unavailable)


# ---------------------------------------------------------------- choosing the sides


def default_baselines(device: str) -> list[str]:
    """All three on CUDA; eager only on the CPU, where torch.compile takes minutes to compile (and
    needs a C++ compiler) and the flash kernels are not what sdpa measures on a GPU."""
    return list(BASELINES) if device.startswith("cuda") else ["eager"]


def parse_baselines(values, device: str) -> list[str]:
    """--baseline values (repeatable, each comma-separated) -> ordered unique names; none: the default."""
    names = [n.strip() for v in values or [] for n in v.split(",") if n.strip()]
    unknown = [n for n in names if n not in BASELINES]
    if unknown:
        raise UserError(
            f"unknown baseline {unknown[0]!r}; choose from {', '.join(BASELINES)} (comma-separated or repeated)"
        )
    return list(dict.fromkeys(names)) or default_baselines(device)


def select_sides(only: str | None, baselines: list[str]) -> list[str]:
    """The sides to run: ours then the baselines; --only ours|gradcraft keeps ours, torch|pytorch the
    baselines."""
    if only is not None and only not in ONLY:
        raise UserError(f"--only takes one of {', '.join(ONLY)}, got {only!r}")
    kind = ONLY.get(only)
    return ([OURS] if kind != "torch" else []) + (list(baselines) if kind != "ours" else [])


# ---------------------------------------------------------------- the sides


def batches(vocab: int, batch: int, seq: int, n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        data = rng.integers(0, vocab, size=(batch, seq + 1))
        yield data[:, :-1], data[:, 1:]


def initial_weights(cfg) -> dict:
    """Our freshly initialized weights (seed 0) as NumPy arrays: every side starts from these."""
    import gradcraft as gc
    from gradcraft.models import Transformer

    gc.manual_seed(0)
    return {k: v.numpy().copy() for k, v in Transformer(cfg).state_dict().items()}


def run_ours(cfg, weights, setup: Setup, n_steps: int):
    """(losses, seconds per step, peak bytes) of n_steps of our training steps."""
    import gradcraft as gc
    from gradcraft.capture import CapturedStep
    from gradcraft.models import Transformer
    from gradcraft.ops.creation import advance_dropout
    from gradcraft.optim import AdamW, grad_norm_and_scale
    from gradcraft.optim.weight_decay import weight_decay_groups

    if setup.device.startswith("cuda"):
        from gradcraft.backend import cuda as gc_cuda

        gc_cuda.set_tf32(setup.tf32)
    model = Transformer(cfg)
    model.load_state_dict(weights)
    model.to(setup.device)
    opt = AdamW(weight_decay_groups(model, 0.1), lr=3e-4, betas=(0.9, 0.95))
    device = gc.device.canonical(setup.device)
    backend = gc.device.get_backend(device)

    compute_dtype = gc.bfloat16 if setup.dtype == "bfloat16" else None

    def step(x_in, y_in):
        if cfg.uses_dropout:
            advance_dropout(device)  # new masks every step, replayed steps included (as the trainer does)
        _, loss = model(x_in, y_in, compute_dtype=compute_dtype)
        loss.backward()
        opt.step(grad_scale=grad_norm_and_scale(model.parameters(), 1.0), prepare=False)
        opt.zero_grad()
        return loss

    # The captured step copies each batch into its own fixed input tensors (what graph replay needs).
    run_step = (
        CapturedStep(step, device)
        if setup.graph
        else (lambda x, y: step(gc.tensor(x, device=device), gc.tensor(y, device=device)))
    )
    losses, times, peak = [], [], 0
    for x, y in batches(cfg.vocab_size, setup.batch, cfg.seq_len, n_steps):
        t0 = time.perf_counter()
        opt.prepare()
        loss = run_step(x, y)
        losses.append(loss.item())
        backend.synchronize()
        times.append(time.perf_counter() - t0)
        # the device memory our process holds (CuPy's pools, a captured graph's included), at its most
        peak = max(peak, backend.memory_info()["reserved_bytes"])
    return losses, times, peak or None


def run_torch(cfg, weights, setup: Setup, n_steps: int, baseline: str = "eager"):
    """The same steps in PyTorch, as `baseline` (eager, sdpa or compile; see the module docstring):
    (losses, seconds per step, peak bytes or None)."""
    import torch

    from gradcraft.benchmarks import torch_reference

    torch.backends.cuda.matmul.allow_tf32 = setup.tf32
    torch.backends.cudnn.allow_tf32 = setup.tf32
    device = torch.device(setup.device)
    cuda = device.type == "cuda"
    # The vocabulary padded as ours; the padded logits are sliced off before the loss, so the losses
    # are the unpadded model's.
    V = cfg.vocab_size
    params = {
        k: torch.tensor(torch_reference.pad_vocab(cfg, k, v), device=device, requires_grad=True)
        for k, v in weights.items()
    }
    decay = [p for p in params.values() if p.ndim >= 2]
    rest = [p for p in params.values() if p.ndim < 2]
    # eager keeps the multi-tensor (foreach) AdamW it always had; the others take the fused kernel on
    # CUDA (the fastest PyTorch offers), foreach on the CPU
    fused = {"fused": True} if baseline != "eager" and cuda else {"foreach": True}
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
        lr=3e-4,
        betas=(0.9, 0.95),
        **fused,
    )
    attention = "explicit" if baseline == "eager" else "sdpa"

    def forward_and_loss(params, x, y):
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=setup.dtype == "bfloat16"):
            logits, aux = torch_reference.forward(cfg, params, x, with_aux=True, attention=attention, train=True)
            logits = logits[..., :V].reshape(-1, V).float()
            return torch.nn.functional.cross_entropy(logits, y.reshape(-1)) + aux

    if baseline == "compile":
        # The parameters are arguments (not closure constants) so the graph takes them as inputs and a
        # later round reuses the compiled code.
        forward_and_loss = torch.compile(forward_and_loss)
    if cuda:
        # what the previous side left in PyTorch's cache must not count as this side's peak
        python_gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    losses, times = [], []
    for x, y in batches(cfg.vocab_size, setup.batch, cfg.seq_len, n_steps):
        t0 = time.perf_counter()
        loss = forward_and_loss(params, torch.tensor(x, device=device), torch.tensor(y, device=device))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(params.values()), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    peak = torch.cuda.max_memory_reserved() if cuda else None
    return losses, times, peak


def runner(side: str):
    if side == OURS:
        return run_ours
    if side in BASELINES:
        return partial(run_torch, baseline=side)
    raise UserError(f"unknown side {side!r}; choose from {OURS}, {', '.join(BASELINES)}")


# ---------------------------------------------------------------- MFU


def matmul_flops(device: str, dtype: str = "float32", tf32: bool = False, n: int | None = None) -> float | None:
    """The matmul rate (FLOP/s) PyTorch reaches on `device` in the run's dtype: a square n^3 product
    (8192 on a GPU, 1024 on the CPU), the median of 5 timed bursts. The ceiling MFU is measured
    against: what a large, well-shaped GEMM reaches here, not the datasheet's peak. None without
    PyTorch."""
    try:
        import torch
    except ImportError:
        return None
    cuda = device.startswith("cuda")
    n = n or (8192 if cuda else 1024)
    torch_dtype = torch.bfloat16 if dtype == "bfloat16" else torch.float32
    old_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    gen = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, generator=gen).to(torch_dtype)
    b = torch.randn(n, n, device=device, generator=gen).to(torch_dtype)
    # a burst of products between synchronisations, so that launching and waiting cost nothing
    burst = 10 if cuda else 3
    times = []
    try:
        for i in range(6):  # the first burst warms up (cuBLAS heuristics, clocks)
            t0 = time.perf_counter()
            for _ in range(burst):
                a @ b
            if cuda:
                torch.cuda.synchronize(device)
            if i:
                times.append((time.perf_counter() - t0) / burst)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old_tf32
    del a, b
    if cuda:
        torch.cuda.empty_cache()
    return 2 * n**3 / float(np.median(times))


def flops_per_token(cfg) -> float:
    """Training FLOPs per token (Transformer.flops_per_token), counting for a mixture-of-experts model
    only the parameters a token uses (the experts it is routed to)."""
    from gradcraft.models import Transformer

    model = Transformer(cfg)
    return model.flops_per_token() - 6 * (model.num_parameters() - model.active_parameters())


# ---------------------------------------------------------------- running and reporting


def compare(cfg, setup: Setup, sides=(OURS, "eager"), rounds: int = 1, peak_flops: float | None = None) -> dict:
    """Run the sides in turn (`rounds` times, alternating, so that a burst of load on the machine hits
    all) and return {side: SideResult}. With peak_flops (see matmul_flops), also each side's MFU.
    A PyTorch side that raises (torch.compile without a compiler, say) is reported, not fatal."""
    weights = initial_weights(cfg)
    times, results = {side: [] for side in sides}, {side: SideResult() for side in sides}
    for _ in range(rounds):
        for side in sides:
            if results[side].error:
                continue
            try:
                losses, step_times, peak = runner(side)(cfg, weights, setup, setup.warmup + setup.steps)
            except Exception as e:  # noqa: BLE001 (one side's failure must not lose the others' numbers)
                if side == OURS:
                    raise
                first_line = (str(e).strip().splitlines() or [""])[0]
                results[side].error = f"{type(e).__name__}: {first_line}"
                continue
            times[side] += step_times[setup.warmup :]
            r = results[side]
            r.losses = losses
            r.first_step_s = r.first_step_s or step_times[0]  # the first round's: torch.compile compiles there
            r.peak_bytes = max(r.peak_bytes or 0, peak or 0) or None
    tokens = setup.batch * cfg.seq_len
    per_token = flops_per_token(cfg) if peak_flops else None
    for side, r in results.items():
        if r.error or not times[side]:
            continue
        r.ms = 1e3 * float(np.median(times[side]))
        r.tokens_per_s = tokens / r.ms * 1e3
        if peak_flops:
            r.mfu = r.tokens_per_s * per_token / peak_flops
    return results


def loss_tolerance(setup: Setup) -> float:
    """How far the first losses of two sides may differ and still be the same training: bf16 rounds
    activations to 8 bits of mantissa; in fp32 (and TF32) only summation order differs, though a
    mixture-of-experts router can send a token elsewhere on a last-bit difference."""
    return 2e-2 if setup.dtype == "bfloat16" else 1e-3


def report(results: dict, setup: Setup | None = None, peak_flops: float | None = None) -> list[str]:
    """Table lines: ms/step, tokens/s, peak memory, MFU and first losses per side, then ours / each
    baseline (tokens/s and peak memory) and how far each side's first losses are from ours."""
    lines = []
    if peak_flops:
        lines.append(f"matmul rate measured through PyTorch: {peak_flops / 1e12:.3g} TFLOP/s (the MFU ceiling)")
    lines.append(f"{'':10s} {'ms/step':>9s} {'tokens/s':>11s} {'peak MiB':>9s} {'MFU':>6s}  first losses")
    for name, r in results.items():
        if r.error:
            lines.append(f"{name:10s} failed: {r.error}")
            continue
        peak_s = f"{r.peak_bytes / 2**20:9.0f}" if r.peak_bytes else f"{'-':>9s}"
        mfu_s = f"{r.mfu:6.1%}" if r.mfu is not None else f"{'-':>6s}"
        lines.append(
            f"{name:10s} {r.ms:9.1f} {r.tokens_per_s:11,.0f} {peak_s} {mfu_s}  "
            f"{' '.join(f'{v:.4f}' for v in r.losses[:3])}"
        )
    if "compile" in results and not results["compile"].error:
        lines.append(f"compile: the first step (compilation included) took {results['compile'].first_step_s:.1f} s")
    ran = {name: r for name, r in results.items() if not r.error}
    if len(ran) < 2:
        return lines
    # the reference all others are compared with: ours when it ran, else the first baseline
    ref_name = OURS if OURS in ran else next(iter(ran))
    ref = ran[ref_name]
    tol = loss_tolerance(setup) if setup else None
    for name, r in ran.items():
        if name == ref_name:
            continue
        memory = f"; peak memory ratio {ref.peak_bytes / r.peak_bytes:.2f}" if ref.peak_bytes and r.peak_bytes else ""
        lines.append(
            f"speed ratio ({ref_name} tokens/s / {name} tokens/s): {ref.tokens_per_s / r.tokens_per_s:.2f}x" + memory
        )
    for name, r in ran.items():
        if name == ref_name:
            continue
        drift = max(abs(a - b) for a, b in zip(ref.losses[:3], r.losses[:3]))
        verdict = "" if tol is None else ("  (agree)" if drift <= tol else f"  MISMATCH: more than {tol:g}")
        lines.append(f"max |loss difference| over the first 3 steps, {name} vs {ref_name}: {drift:.2e}{verdict}")
    return lines


def to_json(results: dict, **context) -> dict:
    """One run as plain data (for `bench/train_gpt.py --json` and bench/plot_train.py): the context
    (configuration, device, ...) and every side's numbers."""
    sides = {}
    for name, r in results.items():
        sides[name] = (
            {"error": r.error}
            if r.error
            else {
                "ms_per_step": r.ms,
                "tokens_per_s": r.tokens_per_s,
                "peak_bytes": r.peak_bytes,
                "mfu": r.mfu,
                "first_step_s": r.first_step_s,
                "losses": r.losses,
            }
        )
    return {**context, "sides": sides}
