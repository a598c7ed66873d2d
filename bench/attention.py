"""Attention forward + backward: gradcraft's fused scaled_dot_product_attention against PyTorch's.

    python bench/attention.py                       # CUDA, bf16: the causal sweep, a sliding window, GQA
    python bench/attention.py --device cpu --seqs 64,128 --tokens 256 --width 128 --extra_seq 128 --window 32

Each case runs gradcraft.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True,
window=...) on gradcraft tensors (created with requires_grad), realizes the output, then
out.backward(grad) (the gradients of q, k and v), and synchronizes the device; PyTorch runs
torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True) and .backward(grad) on the
same values (on CUDA in bf16 that is its flash kernel). Outputs and gradients are first compared
(relative L2 error of ours against PyTorch's), then both are timed: the median of --rounds x --repeat
calls after 3 warm-up calls, wall clock between synchronisations (so our graph building and
scheduling count). --gpu_time adds each side's GPU time per call, kernel by kernel (CUPTI), to tell
kernel time from host time; --phases each side's median time per phase of a call (building the
graph, the forward, the backward, then waiting for the device: host time, and the GPU time it did
not hide). The rounds alternate between the two sides (ours, theirs, ours, ...), so that a
shared machine's drift over the run (PyTorch's own times moved by up to 30% between runs on one
H200) falls on both sides alike rather than on whichever was timed later.

Shapes (default): the causal sweep over T = 512 ... 8192 at head dims 64 and 128, with B*T = --tokens
(16384) sequences' tokens and H = --width / D heads (16 at d64, 8 at d128: a 1024-wide model), so
every T does the same projections' work and attention's cost grows with T. Then, at T = --extra_seq
(4096): a sliding window (--window 256; PyTorch gets the band as a boolean mask, which rules out its
flash kernel: it runs the memory-efficient one over the whole causal square) at the first head dim,
and grouped-query attention (--gqa 16,4: 16 query heads sharing 4 k/v heads; PyTorch: enable_gqa)
at the last head dim.

FLOPs are counted as FlashAttention's benchmarks count them: forward 4 * B * H * D * (T * T / 2)
for causal attention (two products over half the (T, T) scores), T * T / 2 replaced by
T * w - w * w / 2 for a window w; backward 2.5x the forward. Both sides are credited the same
FLOPs, so the TFLOP/s ratio is the inverse time ratio.
"""

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (default: %(default)s)")
    p.add_argument(
        "--dtype", choices=["bfloat16", "float32"], default=None, help="default: bfloat16 on CUDA, float32 on the CPU"
    )
    p.add_argument("--seqs", default="512,1024,2048,4096,8192", help="sequence lengths of the causal sweep")
    p.add_argument("--dims", default="64,128", help="head dimensions of the causal sweep")
    p.add_argument("--tokens", type=int, default=16384, help="B * T of every case (default: %(default)s)")
    p.add_argument("--width", type=int, default=1024, help="H * D of the sweep (default: %(default)s)")
    p.add_argument("--extra_seq", type=int, default=4096, help="T of the window and GQA cases (0: skip them)")
    p.add_argument("--window", type=int, default=256, help="window of the sliding-window case")
    p.add_argument("--gqa", default="16,4", help="query heads,k/v heads of the GQA case")
    p.add_argument("--repeat", type=int, default=10, help="timed calls per case, side and round")
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds of --repeat calls per side")
    p.add_argument("--tf32", action="store_true", help="float32 on CUDA: TF32 products on both sides")
    p.add_argument("--threads", type=int, default=None, help="CPU threads of both sides (default: all cores)")
    p.add_argument(
        "--phases",
        action="store_true",
        help="also each side's time per phase of a call: graph building, forward, backward, device wait",
    )
    p.add_argument(
        "--gpu_time",
        action="store_true",
        help="CUDA: also each side's GPU time per call, kernel by kernel (torch.profiler's CUPTI trace)",
    )
    p.add_argument(
        "--host_profile",
        type=int,
        default=0,
        metavar="N",
        help="also a cProfile of N of our calls (after the timing): the host's functions by own time",
    )
    return p.parse_args(argv)


def attention_flops(B, H, T, D, window=None) -> float:
    """Forward + backward FLOPs of causal attention, FlashAttention's way (see the docstring)."""
    pairs = T * T / 2 if window is None or window >= T else T * window - window * window / 2
    forward = 4 * B * H * D * pairs
    return 3.5 * forward  # forward + backward (2.5x forward)


def cases(args):
    """(name, B, H, Hkv, T, D, window) of every case."""
    out = []
    for D in (int(d) for d in args.dims.split(",")):
        for T in (int(t) for t in args.seqs.split(",")):
            out.append(("causal", max(1, args.tokens // T), args.width // D, args.width // D, T, D, None))
    if args.extra_seq:
        T, dims = args.extra_seq, [int(d) for d in args.dims.split(",")]
        B = max(1, args.tokens // T)
        out.append((f"window {args.window}", B, args.width // dims[0], args.width // dims[0], T, dims[0], args.window))
        H, Hkv = (int(h) for h in args.gqa.split(","))
        out.append((f"gqa {H}/{Hkv}", B, H, Hkv, T, dims[-1], None))
    return out


def rel_err(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def interleaved_medians(fns, repeat: int, rounds: int) -> list[float]:
    """Median seconds of each function: 3 warm-up calls each, then `rounds` rounds in which every
    function in turn is called `repeat` times."""
    for fn in fns:
        for _ in range(3):
            fn()
    times = [[] for _ in fns]
    for _ in range(rounds):
        for fn, samples in zip(fns, times):
            for _ in range(repeat):
                t0 = time.perf_counter()
                fn()
                samples.append(time.perf_counter() - t0)
    return [statistics.median(samples) for samples in times]


def run_case(case, args, dtype, torch, torch_device):
    """(ours seconds, torch seconds, relative errors of out, dq, dk, dv) of one case."""
    import gradcraft as gc
    import gradcraft.nn.functional as F

    name, B, H, Hkv, T, D, window = case
    device = gc.device.canonical(args.device)
    backend = gc.device.get_backend(device)
    gc_dtype = gc.bfloat16 if dtype == "bfloat16" else gc.float32
    torch_dtype = torch.bfloat16 if dtype == "bfloat16" else torch.float32

    gc.manual_seed(0)
    q = gc.randn(B, H, T, D, device=device, dtype=gc_dtype, requires_grad=True).realize()
    k = gc.randn(B, Hkv, T, D, device=device, dtype=gc_dtype, requires_grad=True).realize()
    v = gc.randn(B, Hkv, T, D, device=device, dtype=gc_dtype, requires_grad=True).realize()
    g = gc.randn(B, H, T, D, device=device, dtype=gc_dtype).realize()

    def ours(mark=_no_mark):  # mark(): a time stamp at each phase's end (--phases)
        q.grad = k.grad = v.grad = None  # each call computes fresh gradients (no accumulation)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, window=window)
        mark()
        out.realize()  # the forward kernel (the backward recomputes the weights, it does not read out)
        mark()
        out.backward(g)  # the backward kernel: q.grad, k.grad, v.grad realized
        mark()
        backend.synchronize()
        mark()
        return out

    # PyTorch gets the very same values (bf16 values are exact in float32 on the way over)
    def to_torch(t, grad=True):
        x = torch.tensor(np.asarray(t.numpy(), dtype=np.float32), device=torch_device, dtype=torch_dtype)
        return x.requires_grad_(grad)

    tq, tk, tv, tg = to_torch(q), to_torch(k), to_torch(v), to_torch(g, grad=False)
    mask = None
    if window is not None:
        i = torch.arange(T, device=torch_device)
        mask = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - window)  # (T, T) True = may attend

    def theirs(mark=_no_mark):
        tq.grad = tk.grad = tv.grad = None
        mark()  # (nothing to build: PyTorch launches as it goes)
        if mask is None:
            out = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=True, enable_gqa=H != Hkv)
        else:
            out = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=mask, enable_gqa=H != Hkv)
        mark()
        out.backward(tg)
        mark()
        if torch_device.type == "cuda":
            torch.cuda.synchronize(torch_device)
        mark()
        return out

    out, tout = ours(), theirs()
    errors = [rel_err(out.numpy(), tout.detach().float().cpu().numpy())]
    for ours_t, torch_t in ((q, tq), (k, tk), (v, tv)):
        errors.append(rel_err(ours_t.grad.numpy(), torch_t.grad.float().cpu().numpy()))
    del out, tout
    ours_s, theirs_s = interleaved_medians([ours, theirs], args.repeat, args.rounds)
    if args.phases:
        from gradcraft.engine.realize import kernel_host_time

        with kernel_host_time() as kernel_calls:
            print_phases("ours", *phase_times(ours, args.repeat * args.rounds, kernel_calls))
        print_phases("torch", *phase_times(theirs, args.repeat * args.rounds))
    if args.host_profile:
        print_host_profile(ours, args.host_profile)
    if args.gpu_time:
        for side, fn in (("ours", ours), ("torch", theirs)):
            print_gpu_time(side, kernel_times(fn, args.repeat, torch))
    return ours_s, theirs_s, errors


def print_host_profile(fn, calls: int, top: int = 25) -> None:
    """cProfile of `calls` calls of fn: the `top` functions by their own time, then by cumulative
    time (the profiler's own cost inflates both, about a microsecond a function call)."""
    import cProfile
    import io
    import pstats

    profile = cProfile.Profile()
    profile.enable()
    for _ in range(calls):
        fn()
    profile.disable()
    for order in ("tottime", "cumtime"):
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats(order).print_stats(top)
        lines = [line for line in text.getvalue().splitlines() if line.strip()]
        print(f"    ours host profile, {calls} calls, by {order}:")
        print("\n".join("      " + line for line in lines[2:]))


def _no_mark():
    pass


PHASES = ("build", "forward", "backward", "wait")


def phase_times(fn, calls: int, kernel_calls: dict | None = None) -> tuple[list, list | None]:
    """Median milliseconds of each of PHASES over `calls` calls of fn(mark): building the lazy graph,
    realizing the output (the forward's launch), .backward() (the backward's launches), and waiting
    for the device. On a GPU, the first three are host time (kernels run behind them) and the wait is
    GPU time not hidden behind them. With `kernel_calls` (kernel_host_time's dict, filled while fn
    runs), also the medians of each phase's share in the backend's kernel calls: on a GPU the
    launchers' work and the launches, the rest of a phase being the engine's own (graph, schedule,
    autograd)."""
    samples, in_calls = [[] for _ in PHASES], [[] for _ in PHASES]

    def now():
        return time.perf_counter(), sum(kernel_calls.values()) if kernel_calls is not None else 0.0

    for _ in range(calls):
        stamps = [now()]
        fn(lambda: stamps.append(now()))
        for i in range(len(PHASES)):
            samples[i].append(stamps[i + 1][0] - stamps[i][0])
            in_calls[i].append(stamps[i + 1][1] - stamps[i][1])
    medians = [1e3 * statistics.median(sample) for sample in samples]
    return medians, [1e3 * statistics.median(s) for s in in_calls] if kernel_calls is not None else None


def print_phases(side: str, ms: list, in_calls: list | None = None) -> None:
    parts = [
        f"{name} {t:.3f}" + (f" (kernel calls {c:.3f})" if in_calls is not None and c > 0 else "")
        for name, t, c in zip(PHASES, ms, in_calls or [0.0] * len(PHASES))
    ]
    print(f"    {side} phases (ms, medians): " + ", ".join(parts))


def kernel_times(fn, repeat: int, torch) -> dict:
    """GPU milliseconds per call of each kernel (and memset/memcpy) that `repeat` calls of fn run, as
    CUPTI traced them: the split of the wall time above into kernels, and what the GPU did not do
    (the wall time less their sum: launch gaps and host work the GPU waited for)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(repeat):
            fn()
    times = {}
    for event in prof.key_averages():
        us = getattr(event, "self_device_time_total", None)
        us = us if us is not None else event.self_cuda_time_total  # (the name before torch 2.4)
        if us > 0:
            times[event.key] = times.get(event.key, 0.0) + us / repeat / 1e3
    return times


def print_gpu_time(side: str, times: dict) -> None:
    parts = ", ".join(f"{name[:48]} {ms:.3f}" for name, ms in sorted(times.items(), key=lambda kv: -kv[1]))
    print(f"    {side} GPU {sum(times.values()):.3f} ms: {parts}")


def main(argv=None):
    args = parse_args(argv)
    if args.threads:
        from gradcraft.benchmarks import limit_threads

        limit_threads(args.threads)
    import torch

    import gradcraft as gc

    device = gc.device.canonical(args.device)
    if args.host_profile < 0:
        print(f"error: --host_profile takes a number of calls >= 0, got {args.host_profile}", file=sys.stderr)
        return 2
    if args.gpu_time and not device.startswith("cuda"):
        print("error: --gpu_time traces CUDA kernels; leave it out with --device cpu", file=sys.stderr)
        return 2
    if device.startswith("cuda"):
        if not gc.device.is_available("cuda"):
            print(
                "error: no usable CUDA device here (CuPy and an NVIDIA GPU are needed); use --device cpu",
                file=sys.stderr,
            )
            return 2
        from gradcraft.backend import cuda as gc_cuda

        gc_cuda.set_tf32(args.tf32)
        torch.backends.cuda.matmul.allow_tf32 = args.tf32
    dtype = args.dtype or ("bfloat16" if device.startswith("cuda") else "float32")
    torch_device = torch.device(device)
    # a relative error above this means the two did not compute the same attention
    tolerance = 3e-2 if dtype == "bfloat16" else (5e-3 if args.tf32 else 1e-4)
    print(
        f"attention forward + backward; device {device}; {dtype}; torch {torch.__version__}; "
        f"median of {args.rounds} alternating rounds of {args.repeat} calls after 3"
    )
    print(
        f"{'case':12s} {'B':>3s} {'H':>3s} {'Hkv':>3s} {'T':>5s} {'D':>4s} {'ours ms':>9s} {'torch ms':>9s} "
        f"{'ours TF/s':>9s} {'torch TF/s':>10s} {'ratio':>6s}  rel. error out / dq / dk / dv"
    )
    worst = 0.0
    for case in cases(args):
        name, B, H, Hkv, T, D, window = case
        ours_s, torch_s, errors = run_case(case, args, dtype, torch, torch_device)
        flops = attention_flops(B, H, T, D, window)
        worst = max(worst, *errors)
        print(
            f"{name:12s} {B:3d} {H:3d} {Hkv:3d} {T:5d} {D:4d} {1e3 * ours_s:9.3f} {1e3 * torch_s:9.3f} "
            f"{flops / ours_s / 1e12:9.3g} {flops / torch_s / 1e12:10.3g} {torch_s / ours_s:5.2f}x  "
            + " / ".join(f"{e:.1e}" for e in errors)
        )
    print(
        f"ratio = our TFLOP/s / PyTorch's; worst relative error {worst:.1e} "
        + ("(agree)" if worst <= tolerance else f"MISMATCH: above {tolerance:g}")
    )
    return 0 if worst <= tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
