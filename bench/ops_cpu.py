"""CPU kernels against PyTorch CPU: forward + backward of single ops, and two small training steps.

    python bench/ops_cpu.py --threads 2
    python bench/ops_cpu.py --threads 2 --only sdpa,rope

Each row times one forward and backward pass (ours: build the op, `y.backward(g)`, which realizes
the output and the input gradients in one schedule; PyTorch: the same calls, eagerly) on the same
shapes and the same number of threads (torch.set_num_threads, and gradcraft.backend.blas for NumPy's BLAS;
gradcraft's own elementwise threads stay at its default, one, unless --gc-threads is given: see
gradcraft/backend/cpu/threads.py `num_threads`). The two sides alternate call by call, so a burst of load hits both;
each figure is the median. `speed` = PyTorch's time / ours: 1.0 = as fast, above 1 = we are faster.
The two last rows are whole training steps (forward, backward, AdamW): a 4-layer MLP (Linear + GELU,
width 512, batch 256) and one decoder block of the `demo` preset (LLaMA style, dim 128, 4 heads,
batch 16 x 128), written for PyTorch as gradcraft/benchmarks/torch_reference.py writes the decoder.
"""

import argparse
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=None, help="threads for both sides (default: all cores)")
    p.add_argument("--repeat", type=int, default=15, help="timed calls per side")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--only", default=None, help="comma-separated row names")
    p.add_argument(
        "--gc-threads",
        type=int,
        default=None,
        help="gradcraft's own CPU kernel threads (default: its default, GRADCRAFT_NUM_THREADS or 1)",
    )
    return p.parse_args()


def op_cases(gc, torch):
    """name -> (shape note, setup): setup() returns (ours, theirs), two functions that each run one
    forward + backward pass on the same data."""
    import gradcraft.nn.functional as F
    import torch.nn.functional as TF

    rng = np.random.default_rng(0)

    def arrays(*shapes):
        return [rng.standard_normal(s).astype(np.float32) for s in shapes]

    def fwd_bwd(fn_ours, fn_torch, inputs, extra_ours=(), extra_torch=()):
        """Both sides of `y = fn(*inputs, *extra); y.backward(g)` for float inputs that need grads."""
        ours = [gc.tensor(a, requires_grad=True) for a in inputs]
        theirs = [torch.tensor(a, requires_grad=True) for a in inputs]
        with gc.no_grad():
            out_shape = fn_ours(*ours, *extra_ours).shape
        g = rng.standard_normal(out_shape).astype(np.float32)
        g_ours, g_torch = gc.tensor(g), torch.tensor(g)

        def run_ours():
            for t in ours:
                t.grad = None
            fn_ours(*ours, *extra_ours).backward(g_ours)

        def run_torch():
            for t in theirs:
                t.grad = None
            fn_torch(*theirs, *extra_torch).backward(g_torch)

        return run_ours, run_torch

    def matmul():
        a, b = arrays((2048, 512), (512, 1024))
        return fwd_bwd(lambda x, w: x @ w, lambda x, w: x @ w, [a, b])

    def softmax():
        return fwd_bwd(lambda x: F.softmax(x, -1), lambda x: x.softmax(-1), arrays((4096, 1024)))

    def log_softmax():
        return fwd_bwd(lambda x: F.log_softmax(x, -1), lambda x: x.log_softmax(-1), arrays((4096, 1024)))

    def cross_entropy():
        (logits,) = arrays((2048, 4096))
        target = rng.integers(0, 4096, 2048)
        ours = gc.tensor(logits, requires_grad=True)
        theirs = torch.tensor(logits, requires_grad=True)
        t_ours, t_torch = gc.tensor(target), torch.tensor(target)

        def run_ours():
            ours.grad = None
            F.cross_entropy(ours, t_ours).backward()

        def run_torch():
            theirs.grad = None
            TF.cross_entropy(theirs, t_torch).backward()

        return run_ours, run_torch

    def layer_norm():
        x, w, b = arrays((4096, 512), (512,), (512,))
        return fwd_bwd(
            lambda x, w, b: F.layer_norm(x, (512,), w, b), lambda x, w, b: TF.layer_norm(x, (512,), w, b), [x, w, b]
        )

    def rms_norm():
        x, w = arrays((4096, 512), (512,))
        return fwd_bwd(
            lambda x, w: F.rms_norm(x, (512,), w, 1e-6),
            lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w,
            [x, w],
        )

    def gelu():
        return fwd_bwd(
            lambda x: F.gelu(x, approximate="tanh"), lambda x: TF.gelu(x, approximate="tanh"), arrays((4096, 1024))
        )

    def silu():
        return fwd_bwd(F.silu, TF.silu, arrays((4096, 1024)))

    def rope():
        from gradcraft.benchmarks import torch_reference

        B, H, T, D = 16, 8, 256, 64
        (x,) = arrays((B, H, T, D))
        cos, sin = F.rope_frequencies(T, D)
        # torch: rotate-half written out (gradcraft/benchmarks/torch_reference.py's _rope)
        return fwd_bwd(lambda x: F.rotary_embedding(x, cos, sin), torch_reference._rope, [x])

    def sdpa():
        B, H, T, D = 8, 8, 256, 64
        mask = torch.ones(T, T, dtype=torch.bool).tril()

        def explicit(q, k, v):  # as gradcraft/benchmarks/torch_reference.py writes attention
            att = (q @ k.transpose(-1, -2)) / math.sqrt(D)
            return att.masked_fill(~mask, float("-inf")).softmax(-1) @ v

        return fwd_bwd(
            lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
            explicit,
            arrays((B, H, T, D), (B, H, T, D), (B, H, T, D)),
        )

    def sdpa_torch_math():
        from torch.nn.attention import SDPBackend, sdpa_kernel

        B, H, T, D = 8, 8, 256, 64

        def math_sdpa(q, k, v):
            with sdpa_kernel(SDPBackend.MATH):
                return TF.scaled_dot_product_attention(q, k, v, is_causal=True)

        return fwd_bwd(
            lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
            math_sdpa,
            arrays((B, H, T, D), (B, H, T, D), (B, H, T, D)),
        )

    def small_ops():
        # 40 ops on 8 x 8 tensors (and the ~120 of their backward): the engine's own cost per op
        # (graph, schedule, realize, pool) against PyTorch's eager dispatch, the kernels being tiny
        def chain(x, w):
            for _ in range(10):
                x = (x @ w).tanh() * 0.5 + x
            return x

        return fwd_bwd(chain, chain, arrays((8, 8), (8, 8)))

    def embedding():
        (w,) = arrays((8192, 512))
        idx = rng.integers(0, 8192, (16, 256))
        return fwd_bwd(lambda w: F.embedding(gc.tensor(idx), w), lambda w: TF.embedding(torch.tensor(idx), w), [w])

    return {
        "matmul": ("(2048,512)@(512,1024)", matmul),
        "softmax": ("(4096,1024)", softmax),
        "log_softmax": ("(4096,1024)", log_softmax),
        "cross_entropy": ("(2048,4096) mean", cross_entropy),
        "layer_norm": ("(4096,512)", layer_norm),
        "rms_norm": ("(4096,512) vs written out", rms_norm),
        "gelu": ("(4096,1024) tanh", gelu),
        "silu": ("(4096,1024)", silu),
        "rope": ("(16,8,256,64) vs rotate-half", rope),
        "sdpa": ("(8,8,256,64) causal vs explicit", sdpa),
        "sdpa_math": ("(8,8,256,64) causal vs SDPA math", sdpa_torch_math),
        "embedding": ("8192x512, (16,256) ids", embedding),
        "small_ops": ("40 ops on (8,8), engine overhead", small_ops),
        "mlp_step": ("4x Linear(512)+GELU, b256, AdamW", lambda: mlp_step(gc, torch)),
        "block_step": ("demo Block, (16,128,128), AdamW", lambda: block_step(gc, torch)),
    }


def mlp_step(gc, torch):
    """One training step of a 4-layer MLP (Linear + GELU, width 512, batch 256, MSE loss, AdamW)."""
    import gradcraft.nn as nn
    import gradcraft.nn.functional as F
    from gradcraft.optim import AdamW

    rng = np.random.default_rng(0)
    width, batch, depth = 512, 256, 4
    x = rng.standard_normal((batch, width)).astype(np.float32)
    y = rng.standard_normal((batch, width)).astype(np.float32)
    layers = [nn.Linear(width, width) for _ in range(depth)]
    params = [p for layer in layers for p in layer.parameters()]
    opt = AdamW(params, lr=1e-3, weight_decay=0.1)
    x_ours, y_ours = gc.tensor(x), gc.tensor(y)
    t_params = [torch.tensor(p.numpy().copy(), requires_grad=True) for p in params]
    t_opt = torch.optim.AdamW(t_params, lr=1e-3, weight_decay=0.1, foreach=True)
    x_t, y_t = torch.tensor(x), torch.tensor(y)

    def run_ours():
        h = x_ours
        for layer in layers:
            h = F.gelu(layer(h), approximate="tanh")
        F.mse_loss(h, y_ours).backward()
        opt.step()
        opt.zero_grad()

    def run_torch():
        h = x_t
        for i in range(depth):
            h = torch.nn.functional.gelu(h @ t_params[2 * i].T + t_params[2 * i + 1], approximate="tanh")
        torch.nn.functional.mse_loss(h, y_t).backward()
        t_opt.step()
        t_opt.zero_grad(set_to_none=True)

    return run_ours, run_torch


def block_step(gc, torch):
    """One training step of one decoder block of the demo preset: y = Block(x); loss = sum(y * g); AdamW."""
    import gradcraft.nn.functional as F
    from gradcraft.benchmarks import torch_reference
    from gradcraft.models import preset
    from gradcraft.models.transformer import Block
    from gradcraft.optim import AdamW

    cfg = preset("demo", seq_len=128)
    B, T, C = 16, cfg.seq_len, cfg.dim
    H, Hkv, D = cfg.n_heads, cfg.n_kv_heads, cfg.dim // cfg.n_heads
    gc.manual_seed(0)
    block = Block(cfg, 0)
    for name, p in block.named_parameters():  # a Block alone is not initialised: normal weights, unit norms
        if "norm" not in name:
            p.assign(gc.randn(*p.shape) * 0.02).realize()
    rng = np.random.default_rng(0)
    x, g = rng.standard_normal((B, T, C)).astype(np.float32), rng.standard_normal((B, T, C)).astype(np.float32)
    rope = tuple(t.realize() for t in F.rope_frequencies(T, D, cfg.rope_base))
    opt = AdamW(block.parameters(), lr=3e-4, weight_decay=0.1)
    x_ours, g_ours = gc.tensor(x), gc.tensor(g)

    P = {n: torch.tensor(p.numpy().copy(), requires_grad=True) for n, p in block.named_parameters()}
    t_opt = torch.optim.AdamW(list(P.values()), lr=3e-4, weight_decay=0.1, foreach=True)
    x_t, g_t = torch.tensor(x), torch.tensor(g)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    F_t = torch.nn.functional

    def torch_block(x):  # gradcraft/benchmarks/torch_reference.py's layer loop, for the LLaMA-style layer
        h = torch_reference._norm(cfg, x, P["norm1.weight"], None)
        q, k, v = (h @ P["attn.qkv.weight"].T).split([H * D, Hkv * D, Hkv * D], dim=-1)
        q = torch_reference._rope(q.view(B, T, H, D).transpose(1, 2), base=cfg.rope_base)
        k = torch_reference._rope(k.view(B, T, Hkv, D).transpose(1, 2), base=cfg.rope_base)
        v = v.view(B, T, Hkv, D).transpose(1, 2)
        att = ((q @ k.transpose(-1, -2)) / math.sqrt(D)).masked_fill(~mask, float("-inf")).softmax(-1)
        x = x + (att @ v).transpose(1, 2).reshape(B, T, H * D) @ P["attn.proj.weight"].T
        h = torch_reference._norm(cfg, x, P["norm2.weight"], None) @ P["mlp.fc.weight"].T
        gate, up = h.chunk(2, dim=-1)
        return x + (F_t.silu(gate) * up) @ P["mlp.proj.weight"].T

    def run_ours():
        block(x_ours, rope).backward(g_ours)
        opt.step()
        opt.zero_grad()

    def run_torch():
        torch_block(x_t).backward(g_t)
        t_opt.step()
        t_opt.zero_grad(set_to_none=True)

    return run_ours, run_torch


def time_pair(run_ours, run_torch, repeat, warmup):
    """Median seconds of each, calls alternating."""
    for _ in range(warmup):
        run_ours()
        run_torch()
    ours, theirs = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        run_ours()
        t1 = time.perf_counter()
        run_torch()
        t2 = time.perf_counter()
        ours.append(t1 - t0)
        theirs.append(t2 - t1)
    return float(np.median(ours)), float(np.median(theirs))


def main():
    args = parse_args()
    threads = args.threads or len(os.sched_getaffinity(0))
    from gradcraft.benchmarks import limit_threads

    torch = limit_threads(threads)
    import gradcraft as gc
    from gradcraft.backend import cpu

    if args.gc_threads:
        cpu.set_num_threads(args.gc_threads)
    cases = op_cases(gc, torch)
    names = args.only.split(",") if args.only else list(cases)
    print(
        f"{threads} threads (torch {torch.get_num_threads()}, gradcraft {cpu.num_threads()}); "
        f"numpy {np.__version__}, torch {torch.__version__}; median of {args.repeat}; "
        "speed = torch ms / ours ms (above 1: ours faster)"
    )
    print(f"{'op':12s} {'shape':34s} {'ours ms':>9s} {'torch ms':>9s} {'speed':>6s}")
    for name in names:
        shape, setup = cases[name]
        ours, theirs = time_pair(*setup(), args.repeat, args.warmup)
        print(f"{name:12s} {shape:34s} {1e3 * ours:9.2f} {1e3 * theirs:9.2f} {theirs / ours:6.2f}", flush=True)


if __name__ == "__main__":
    main()
