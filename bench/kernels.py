"""Each fused CUDA kernel against the composite of primitive kernels and against PyTorch.

Every case is validated first (fused vs composite vs torch, relative L2 error), then timed with CUDA
events (median of --repeat runs after warm-up). GB/s counts the fewest bytes the op must move (inputs
read once, outputs written once; a causal softmax counts its whole input, though it reads only the
allowed half) for ours and for PyTorch's kernel, each also as a share of the H200's 4.3 TB/s
(--peak-gbs) and of the measured device-to-device copy bandwidth.

    PYTHONPATH=src python3 bench/kernels.py [--repeat 20] [--dtype float32|bfloat16] [--only norm,softmax]
"""

import argparse
import statistics
import sys

import cupy as cp
import numpy as np

from gradcraft.backend.cuda import softmax as cuda_softmax
from gradcraft.device import get_backend

B = None  # the CUDA backend
ADAMW = dict(beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01)  # torch.optim.AdamW's defaults


def timed(fn, repeat):
    for _ in range(3):
        fn()
    cp.cuda.Device().synchronize()
    times = []
    for _ in range(repeat):
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop))
    return statistics.median(times)


def rel_err(a, b):
    a, b = cp.asarray(a, dtype=np.float64), cp.asarray(b, dtype=np.float64)
    return float(cp.linalg.norm(a - b) / max(float(cp.linalg.norm(b)), 1e-30))


def copy_bandwidth(repeat):
    x = cp.random.standard_normal(1 << 28, dtype=np.float32)  # 1 GiB
    y = cp.empty_like(x)
    ms = timed(lambda: y.__setitem__(Ellipsis, x), repeat)
    return 2 * x.nbytes / ms / 1e6


def torch_of(a):
    import torch

    return torch.from_dlpack(a)


def run(op, *args, **attrs):
    return B.run(op, list(args), attrs)


# ---------------------------------------------------------------- cases: (name, bytes, fused, composite, torch)


def cases(dtype):
    import torch
    import torch.nn.functional as F

    rng = cp.random.default_rng(0)
    rows, width = 8192, 768

    def randn(*shape):
        return rng.standard_normal(shape, dtype=np.float32).astype(dtype)

    item = np.dtype(dtype).itemsize
    x = randn(rows, width)
    w, b = cp.ones(width, np.float32).astype(dtype), cp.zeros(width, np.float32).astype(dtype)
    g = randn(rows, width)
    logits = randn(8192, 50257)
    target = rng.integers(0, 50257, size=8192).astype(np.int64)
    att = randn(8 * 12 * 1024, 1024).reshape(8, 12, 1024, 1024)
    big = randn(8192, 3072)
    g_big = randn(8192, 3072)
    q = randn(8, 12, 1024, 64)
    angles = rng.random((1024, 32), dtype=np.float32)
    cos, sin = cp.cos(angles).astype(dtype), cp.sin(angles).astype(dtype)
    table = randn(50257, 768)
    idx = rng.integers(0, 50257, size=(8, 1024)).astype(np.int64)
    tx = {
        k: torch_of(v)
        for k, v in dict(
            x=x, w=w, b=b, g=g, logits=logits, target=target, att=att, big=big, q=q, table=table, idx=idx, g_big=g_big
        ).items()
    }

    def layer_norm_composite():
        mean = run("div", run("sum", x, axes=(1,), keepdim=True), cp.asarray(width, dtype))
        c = run("sub", x, mean)
        var = run("div", run("sum", run("mul", c, c), axes=(1,), keepdim=True), cp.asarray(width, dtype))
        return run("add", run("mul", run("mul", c, run("rsqrt", run("add", var, cp.asarray(1e-5, dtype)))), w), b)

    def softmax_composite(a):
        e = run("exp", run("sub", a, run("max", a, axes=(a.ndim - 1,), keepdim=True)))
        return run("div", e, run("sum", e, axes=(a.ndim - 1,), keepdim=True))

    def causal_composite():
        T = att.shape[-1]
        allowed = cp.tril(cp.ones((T, T), dtype=bool))
        return softmax_composite(
            run("where", allowed, run("mul", att, cp.asarray(0.125, dtype)), cp.asarray(-np.inf, dtype))
        )

    def ce_composite():
        logp = run("sub", logits, run("max", logits, axes=(1,), keepdim=True))
        logp = run("sub", logp, run("log", run("sum", run("exp", logp), axes=(1,), keepdim=True)))
        return run("neg", run("take_along_dim", logp, target[:, None], axis=1))[:, 0]

    def gelu_composite():
        inner = run(
            "mul",
            run("add", big, run("mul", run("mul", run("mul", big, big), big), cp.asarray(0.044715, dtype))),
            cp.asarray(0.7978845608, dtype),
        )
        return run("mul", run("mul", big, cp.asarray(0.5, dtype)), run("add", run("tanh", inner), cp.asarray(1, dtype)))

    def rope_composite():
        x1, x2 = q[..., :32], q[..., 32:]
        return run(
            "cat",
            run("sub", run("mul", x1, cos), run("mul", x2, sin)),
            run("add", run("mul", x2, cos), run("mul", x1, sin)),
            axis=-1,
        )

    def torch_rope():
        tq, tc, ts = tx["q"], torch_of(cos), torch_of(sin)
        x1, x2 = tq[..., :32], tq[..., 32:]
        return torch.cat([x1 * tc - x2 * ts, x2 * tc + x1 * ts], dim=-1)

    mask = torch.ones(1024, 1024, dtype=torch.bool, device="cuda").tril()
    probs = cuda_softmax.softmax_rows(att, 0.125, None, True, None, 1024, 1024)
    g_att = randn(*att.shape)
    h = randn(8192, 2 * 3072)  # SwiGLU: [gate | up]
    g_half = randn(8192, 3072)
    g_emb = randn(8, 1024, 768)
    tx.update(
        probs=torch_of(probs), g_att=torch_of(g_att), h=torch_of(h), g_half=torch_of(g_half), g_emb=torch_of(g_emb)
    )
    tdtype = tx["x"].dtype

    _, ln_mean, ln_rstd = torch.ops.aten.native_layer_norm(tx["x"], [width], tx["w"], tx["b"], 1e-5)

    def torch_layer_norm_backward():  # (PyTorch keeps the forward's mean and rstd: it reads those too)
        return torch.ops.aten.native_layer_norm_backward(
            tx["g"], tx["x"], [width], ln_mean, ln_rstd, tx["w"], tx["b"], [True, True, True]
        )[0]

    seed = 1234
    keep = run("dropout", cp.ones_like(big), seed=seed, p=0.1)

    # gpt2-124m's loss at training size whatever --dtype: (16384, 50304) bf16 logits, 50257 classes; the
    # padding is -inf so that PyTorch, which reads every column, computes the same losses
    V, VP = 50257, 50304
    gpt_logits = rng.standard_normal((16384, VP), dtype=np.float32)
    gpt_logits[:, V:] = -np.inf
    gpt_logits = gpt_logits.astype("bfloat16")
    gpt_target = rng.integers(0, V, size=16384).astype(np.int64)
    gpt_g = cp.full(16384, 1 / 16384, np.float32)
    tx.update(gpt_logits=torch_of(gpt_logits), gpt_target=torch_of(gpt_target))
    gpt_ce = dict(ignore_index=-100, label_smoothing=0.0, valid_classes=V, float_loss=True)
    return [
        (
            "layer_norm fwd",
            2 * x.nbytes,
            lambda: run("layer_norm", x, w, b, eps=1e-5, n_dims=1),
            layer_norm_composite,
            lambda: F.layer_norm(tx["x"], (width,), tx["w"], tx["b"], 1e-5),
        ),
        (
            "layer_norm bwd",
            3 * x.nbytes,
            lambda: run("layer_norm_backward", x, w, g, eps=1e-5, n_dims=1)[0],
            None,
            torch_layer_norm_backward,
        ),
        (
            "rms_norm fwd",
            2 * x.nbytes,
            lambda: run("rms_norm", x, w, eps=1e-6, n_dims=1),
            None,
            lambda: F.rms_norm(tx["x"], (width,), tx["w"], 1e-6),
        ),
        ("rms_norm bwd", 3 * x.nbytes, lambda: run("rms_norm_backward", x, w, g, eps=1e-6, n_dims=1)[0], None, None),
        (
            "softmax 50257",
            2 * logits.nbytes,
            lambda: run("softmax", logits, axis=1),
            lambda: softmax_composite(logits),
            lambda: torch.softmax(tx["logits"], dim=1),
        ),
        (
            "causal softmax attn",
            2 * att.nbytes,
            lambda: cuda_softmax.softmax_rows(att, 0.125, None, True, None, 1024, 1024),
            causal_composite,
            lambda: torch.softmax((tx["att"] * 0.125).masked_fill(~mask, float("-inf")), dim=-1),
        ),
        (
            "softmax bwd attn",
            3 * att.nbytes,
            lambda: cuda_softmax.softmax_rows_backward(probs, g_att),
            None,
            lambda: torch.ops.aten._softmax_backward_data(tx["g_att"], tx["probs"], -1, tdtype),
        ),
        (
            "cross_entropy fwd",
            logits.nbytes,
            lambda: run("cross_entropy", logits, target, ignore_index=-100, label_smoothing=0.0),
            ce_composite,
            lambda: F.cross_entropy(tx["logits"].float(), tx["target"], reduction="none"),
        ),
        ("ce loss+grad 1 pass", 2 * logits.nbytes, lambda: B.cross_entropy_with_grad(logits, target)[1], None, None),
        (
            "ce 16384x50304 fwd",
            gpt_logits.nbytes,
            lambda: run("cross_entropy", gpt_logits, gpt_target, **gpt_ce),
            None,
            lambda: F.cross_entropy(tx["gpt_logits"], tx["gpt_target"], reduction="none"),
        ),
        (
            "ce 16384x50304 bwd",
            2 * gpt_logits.nbytes,
            lambda: run("cross_entropy_backward", gpt_logits, gpt_target, gpt_g, **gpt_ce),
            None,
            None,
        ),
        (
            "gelu tanh fwd",
            2 * big.nbytes,
            lambda: run("gelu", big, approximate="tanh"),
            gelu_composite,
            lambda: F.gelu(tx["big"], approximate="tanh"),
        ),
        (
            "gelu tanh bwd",
            3 * big.nbytes,
            lambda: run("gelu_backward", big, g_big, approximate="tanh"),
            None,
            lambda: torch.ops.aten.gelu_backward(tx["g_big"], tx["big"], approximate="tanh"),
        ),
        ("gelu erf fwd", 2 * big.nbytes, lambda: run("gelu", big, approximate="none"), None, lambda: F.gelu(tx["big"])),
        ("silu fwd", 2 * big.nbytes, lambda: run("silu", big), None, lambda: F.silu(tx["big"])),
        (
            "silu bwd",
            3 * big.nbytes,
            lambda: run("silu_backward", big, g_big),
            None,
            lambda: torch.ops.aten.silu_backward(tx["g_big"], tx["big"]),
        ),
        (
            "swiglu fwd",
            3 * g_half.nbytes,
            lambda: run("swiglu", h),
            None,
            lambda: F.silu(tx["h"][:, :3072]) * tx["h"][:, 3072:],
        ),
        ("swiglu bwd", 5 * g_half.nbytes, lambda: run("swiglu_backward", h, g_half), None, None),
        ("rope", 2 * q.nbytes, lambda: run("rope", q, cos, sin, inverse=False), rope_composite, torch_rope),
        (
            "embedding fwd",
            2 * idx.size * 768 * item,
            lambda: run("embedding", table, idx),
            lambda: run("index", table, idx, spec=(0,)),
            lambda: F.embedding(tx["idx"], tx["table"]),
        ),
        (
            "embedding bwd",
            (idx.size + 50257) * 768 * item,  # (gradient rows read, the whole table written)
            lambda: run("embedding_backward", idx, g_emb, num_embeddings=50257),
            None,
            lambda: torch.ops.aten.embedding_dense_backward(tx["g_emb"], tx["idx"], 50257, -1, False),
        ),
        (
            "dropout p=0.1",
            2 * big.nbytes,
            lambda: run("dropout", big, seed=seed, p=0.1),
            lambda: run("mul", big, keep),
            None,
        ),
        ("binary add", 3 * big.nbytes, lambda: run("add", big, g_big), None, lambda: tx["big"] + tx["g_big"]),
        (
            "bias add (3072,)",
            2 * big.nbytes + g_big[0].nbytes,
            lambda: run("add", big, g_big[0]),
            None,
            lambda: tx["big"] + tx["g_big"][0],
        ),
    ]


def optimizer_cases():
    sizes = [50257 * 768, 1024 * 768] + [768 * 2304, 768 * 768, 768 * 3072, 3072 * 768, 768, 768] * 12
    params = [cp.random.standard_normal(n, dtype=np.float32) for n in sizes]
    grads = [cp.random.standard_normal(n, dtype=np.float32) for n in sizes]
    m = [cp.zeros(n, np.float32) for n in sizes]
    v = [cp.zeros(n, np.float32) for n in sizes]
    lr_step = cp.asarray(np.array([1e-3, 1], np.float32))
    total = sum(sizes) * 4
    return [
        ("adamw (124M params)", 7 * total, lambda: B.adamw_step(params, grads, m, v, lr_step, **ADAMW), None, None),
        ("grad norm (124M)", total, lambda: B.grad_norm(grads, 1.0), None, None),
    ]


def measure(name, nbytes, fused, composite, reference, repeat, peak, nominal):
    out = fused()
    errors = []
    for other in (composite, reference):
        if other is None:
            errors.append("-")
            continue
        expected = other()
        expected = cp.asarray(expected) if not hasattr(expected, "cpu") else cp.from_dlpack(expected.contiguous())
        errors.append(f"{rel_err(out, expected):.1e}")
    t_fused = timed(fused, repeat)
    t_comp = timed(composite, repeat) if composite else None
    t_ref = timed(reference, repeat) if reference else None
    gbs = nbytes / t_fused / 1e6
    torch_gbs = nbytes / t_ref / 1e6 if t_ref else None
    return (
        name,
        t_fused,
        t_comp,
        t_ref,
        gbs,
        100 * gbs / nominal,
        torch_gbs,
        100 * torch_gbs / nominal if torch_gbs else None,
        100 * gbs / peak,
        *errors,
    )


def main():
    global B
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument(
        "--peak-gbs", type=float, default=4300.0, help="the bandwidth to compare with, GB/s read + write (H200: ~4300)"
    )
    parser.add_argument("--only", default="", help="comma-separated substrings of the case names to run")
    args = parser.parse_args()
    dtype = np.dtype(args.dtype)
    B = get_backend("cuda:0")
    peak = copy_bandwidth(args.repeat)
    rows = []
    try:
        import torch  # noqa: F401

        all_cases = cases(dtype) + optimizer_cases()
    except ImportError:
        print("torch not found: comparing with the composites only", file=sys.stderr)
        raise
    only = [o for o in args.only.split(",") if o]
    for name, nbytes, fused, composite, reference in all_cases:
        if only and not any(o in name for o in only):
            continue
        try:
            rows.append(measure(name, nbytes, fused, composite, reference, args.repeat, peak, args.peak_gbs))
        except Exception as error:  # report and go on: one broken case must not hide the others
            print(f"{name}: {type(error).__name__}: {error}", file=sys.stderr)
            rows.append(
                (name, float("nan"), None, None, float("nan"), float("nan"), None, None, float("nan"), "error", "error")
            )
    print(
        f"\nCUDA kernels, {args.dtype}, median of {args.repeat}; measured copy bandwidth {peak:.0f} GB/s, "
        f"% of {args.peak_gbs:.0f} GB/s (read + write)"
    )
    head = (
        f"{'kernel':22s} {'fused ms':>9s} {'compos. ms':>10s} {'torch ms':>9s} {'GB/s':>7s} {'%peak':>6s} "
        f"{'torchGB/s':>9s} {'%peak':>6s} {'%copy':>6s} {'err/comp':>9s} {'err/torch':>9s}"
    )
    print(head)
    print("-" * len(head))
    for name, tf, tc, tr, gbs, pct, tgbs, tpct, pct_copy, e1, e2 in rows:
        fmt = lambda t, spec=".3f": format(t, spec) if t is not None else "-"  # noqa: E731
        print(
            f"{name:22s} {tf:9.3f} {fmt(tc):>10s} {fmt(tr):>9s} {gbs:7.0f} {pct:5.0f}% {fmt(tgbs, '.0f'):>9s} "
            f"{fmt(tpct, '.0f'):>5s}% {pct_copy:5.0f}% {e1:>9s} {e2:>9s}"
        )


if __name__ == "__main__":
    main()
