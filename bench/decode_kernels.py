"""A decoding step's kernels alone on the GPU: the few-row products (kernels/gemv.cu, with variants of
its sizes) against cuBLAS, the fused norm_linear kernel (the product with the residual add and norm
before it and the bias and activation after it) against the chain of separate kernels it replaces, the
KV-cache attention (the split kernel, whose last block a head merges the chunks) against the
one-block-per-head kernel, the greedy argmax against CuPy's.

    python bench/decode_kernels.py                     # llama-110m's and gpt2-124m's shapes
    python bench/decode_kernels.py --rows 1,8 --variants 1x4,2x4,4x4,2x8
    python bench/decode_kernels.py --only norm_linear   # one section: gemv, norm_linear, chain, kv, argmax
    python bench/decode_kernels.py --only chain --pdl both  # a layer's products in sequence, PDL off and on

Every case is captured 50 times into one CUDA graph and replayed (as the decoding step replays its
graph), so the time per launch is the kernel plus the graph's launch gap, without Python's launch
cost. Prints microseconds per launch and, for the products, the bandwidth of reading the weight
(against the H200's ~4.3 TB/s device-to-device copy).

--pdl (gemv, norm_linear and chain sections): launch the products with programmatic dependent launch
(backend/cuda/pdl.py, sm_90+) `on`, `off` (GRADCRAFT_PDL=0), or `both`, one row each. The chain
section times gpt2-124m's layer products as its decoding step launches them, each reading the output
before it (PDL overlaps one kernel's weight loads with the tail of the one before: the case it is for).
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))

# (name, N, K): the products of one layer and the output layer, weight (N, K)
SHAPES = [
    ("llama-110m qkv", 2304, 768),
    ("llama-110m o", 768, 768),
    ("llama-110m gate+up", 4096, 768),
    ("llama-110m down", 768, 2048),
    ("llama-110m head", 32000, 768),
    ("gpt2-124m fc", 3072, 768),
    ("gpt2-124m proj", 768, 3072),
    ("gpt2-124m head", 50304, 768),  # (the vocabulary padded as in training)
    ("gpt2-124m head", 50257, 768),  # (decoding: the true vocabulary)
]

# (name, N, K, attributes of norm_linear): a layer's products with what surrounds them in the model
NORM_LINEAR_SHAPES = [
    ("llama-110m qkv", 2304, 768, dict(residual=True, norm="rms_norm", bias=False, activation=None)),
    ("llama-110m gate+up", 4096, 768, dict(residual=True, norm="rms_norm", bias=False, activation="swiglu")),
    ("gpt2-124m qkv", 2304, 768, dict(residual=True, norm="layer_norm", bias=True, activation=None)),
    ("gpt2-124m fc", 3072, 768, dict(residual=True, norm="layer_norm", bias=True, activation="gelu_tanh")),
    ("gpt2-124m proj", 768, 3072, dict(residual=False, norm=None, bias=True, activation=None)),
]
SECTIONS = ("gemv", "norm_linear", "chain", "kv", "argmax")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", default="1,2,8", help="rows of x (tokens in the step), a comma list")
    p.add_argument("--variants", default="1x4,2x4,1x8,2x8", help="output columns per warp (1, 2) x GEMV_UNROLL choices")
    p.add_argument("--shapes", help="only the products whose name holds this text (e.g. head)")
    p.add_argument("--copies", type=int, default=50, help="launches per captured graph")
    p.add_argument("--only", choices=SECTIONS, help="run one section (default: all)")
    p.add_argument(
        "--pdl",
        choices=("on", "off", "both"),
        default="both",
        help="programmatic dependent launch of the products (sm_90+; default both where supported)",
    )
    p.add_argument("--layers", type=int, default=12, help="layers of products in the chain section")
    args = p.parse_args(argv)
    sections = [args.only] if args.only else SECTIONS

    import cupy as cp

    def per_launch_us(fn) -> float:
        fn()  # compile and warm up outside the capture
        stream = cp.cuda.Stream(non_blocking=True)
        with stream:
            stream.begin_capture()
            for _ in range(args.copies):
                fn()
            graph = stream.end_capture()
        graph.launch(stream)
        stream.synchronize()
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record(stream)
        for _ in range(5):
            graph.launch(stream)
        end.record(stream)
        end.synchronize()
        return cp.cuda.get_elapsed_time(start, end) * 1e3 / (5 * args.copies)

    print(f"GPU: {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}, CuPy {cp.__version__}; bf16; us per launch")
    modes = pdl_modes(args.pdl)
    if "gemv" in sections:
        products(args, per_launch_us, modes)
    if "norm_linear" in sections:
        norm_linear(per_launch_us, modes)
    if "chain" in sections:
        chain(args, per_launch_us, modes)
    if "kv" in sections:
        kv_attention(per_launch_us)
    if "argmax" in sections:
        argmax(per_launch_us)


def pdl_modes(choice: str) -> list[str]:
    """The PDL settings to time ("off", "on"), as --pdl asks and the GPU allows."""
    from gradcraft.backend.cuda import pdl

    modes = {"on": ["on"], "off": ["off"], "both": ["off", "on"]}[choice]
    if "on" in modes and not pdl.supported():
        if choice == "on":
            raise SystemExit("error: --pdl on needs an sm_90+ GPU and a CUDA 12.3+ driver, use --pdl off")
        print("(programmatic dependent launch is not supported here: normal launches only)")
        modes = ["off"]
    return modes


def set_pdl(mode: str) -> None:
    """pdl.available() reads GRADCRAFT_PDL at each launch (and so at each capture)."""
    os.environ["GRADCRAFT_PDL"] = "1" if mode == "on" else "0"


def products(args, per_launch_us, modes):
    import cupy as cp
    import numpy as np

    from gradcraft.backend.cuda import compiler, gemv, matmul

    bf16 = np.dtype("bfloat16")
    variants = [tuple(int(v) for v in s.split("x")) for s in args.variants.split(",")]
    names = " ".join(f"{f'{o}x{u}':>8s}" for o, u in variants)
    print(f"{'product':22s} {'rows':>4s} {'pdl':>3s} {'cuBLAS':>8s} {names}  best GB/s")
    for name, N, K in SHAPES:
        if args.shapes and args.shapes not in name:
            continue
        w = cp.asarray(np.random.default_rng(0).standard_normal((N, K), dtype=np.float32)).astype(bf16)
        for rows in [int(r) for r in args.rows.split(",")]:
            x = cp.asarray(np.random.default_rng(1).standard_normal((rows, K), dtype=np.float32)).astype(bf16)
            out = cp.empty((rows, N), bf16)
            reference = x.astype(np.float32) @ w.astype(np.float32).T

            def cublas():  # the same product through cuBLAS (gemm with the GEMV path turned off)
                keep, gemv.MAX_ROWS = gemv.MAX_ROWS, 0
                try:
                    matmul.gemm(x, w.T, out=out)
                finally:
                    gemv.MAX_ROWS = keep

            set_pdl("off")
            cublas = per_launch_us(cublas)
            for mode in modes:
                set_pdl(mode)
                times = []
                for outputs, unroll in variants:
                    options = compiler.OPTIONS + (f"-DGEMV_UNROLL={unroll}",)
                    module = compiler.module(gemv.FILE, cp.cuda.Device().id, options)

                    def run(module=module, outputs=outputs):
                        gemv.gemv(x, K, w, out, rows, N, K, function=module.get_function, outputs=outputs)

                    out.fill(0)
                    run()
                    error = float(cp.abs(out.astype(np.float32) - reference).max() / cp.abs(reference).max())
                    if error > 2e-2:
                        raise SystemExit(f"{name} {outputs}x{unroll} (pdl {mode}): relative error {error:.1e}")
                    times.append(per_launch_us(run))
                best = min(times)
                row = f"{name:22s} {rows:4d} {mode:>3s} {cublas:8.2f} " + " ".join(f"{t:8.2f}" for t in times)
                print(f"{row}  {N * K * 2 / best / 1e3:8.0f}")


def norm_linear(per_launch_us, modes):
    """The fused kernel (threads a block as the launcher picks them; 128) against the separate kernels
    the unfused model launches for the same layer: add, norm, the product (gemv), bias add, activation;
    and beside them the plain GEMV of the same weight alone, the floor the fused kernel's prologue
    (add, norm, barriers: hidden behind its first loads of W) adds to."""
    import cupy as cp
    import numpy as np

    from gradcraft.backend.cuda import gemv
    from gradcraft.backend.cuda import launch as L
    from gradcraft.device import get_backend

    kernels = get_backend("cuda").kernels
    bf16 = np.dtype("bfloat16")
    rng = np.random.default_rng(0)

    def draw(*shape, scale=1.0, shift=0.0):
        return cp.asarray(rng.standard_normal(shape, dtype=np.float32) * scale + shift).astype(bf16)

    print("\nnorm_linear: one row's product with the residual add, norm, bias and activation around it")
    print(f"{'layer':22s} {'pdl':>3s} {'unfused':>8s} {'fused':>8s} {'fused128':>8s} {'gemv':>8s}  fused GB/s")
    for name, N, K, attrs in NORM_LINEAR_SHAPES:
        x, res, w = draw(1, K), draw(1, K), draw(N, K, scale=K**-0.5)
        nw = draw(K, scale=0.2, shift=1.0) if attrs["norm"] else None
        nb = draw(K, scale=0.1) if attrs["norm"] == "layer_norm" else None
        b = draw(N, scale=0.5) if attrs["bias"] else None
        attrs = dict(attrs, eps=1e-5, norm_bias=nb is not None)
        arrays = [a for a in (x, res if attrs["residual"] else None, nw, nb, w, b) if a is not None]

        def unfused():
            s = kernels["add"](x, res) if attrs["residual"] else x
            if attrs["norm"] == "rms_norm":
                s = kernels["rms_norm"](s, nw, eps=1e-5, n_dims=1)
            elif attrs["norm"] == "layer_norm":
                s = kernels["layer_norm"](s, nw, nb, eps=1e-5, n_dims=1)
            h = kernels["matmul"](s, w.T)
            if b is not None:
                h = kernels["add"](h, b)
            if attrs["activation"] == "swiglu":
                return kernels["swiglu"](h)
            if attrs["activation"] == "gelu_tanh":
                return kernels["gelu"](h, approximate="tanh")
            return h

        def fused(threads=None, function=None):
            out = gemv.norm_linear(*arrays, **attrs, threads=threads, function=function)
            return out[0] if attrs["residual"] else out

        for mode in modes:
            set_pdl(mode)
            reference, got = unfused().astype(np.float32), fused().astype(np.float32)
            error = float(cp.abs(got - reference).max() / cp.abs(reference).max())
            if error > 2e-2:
                raise SystemExit(f"{name} (pdl {mode}): the fused kernel differs from the chain by {error:.1e}")
            product = L.empty((1, N), x.dtype)
            times = [per_launch_us(unfused), per_launch_us(fused), per_launch_us(lambda: fused(128))]
            times.append(per_launch_us(lambda: gemv.gemv(x, K, w, product, 1, N, K)))
            row = f"{name:22s} {mode:>3s} " + " ".join(f"{t:8.2f}" for t in times)
            print(f"{row}  {N * K * 2 / times[1] / 1e3:8.0f}")


def chain(args, per_launch_us, modes):
    """gpt2-124m's decoding products, layer after layer, each launch reading the output of the one
    before (the attention between qkv and its output projection left out: the projection reads the
    first 768 columns of qkv): `fused` as the decoding step launches them (norm_linear for qkv, the
    attention's projection, fc with the norm and GELU, proj), `gemv` the same four products as plain
    GEMVs. Each is captured --copies times into one graph; us per launch and per layer."""
    import cupy as cp
    import numpy as np

    from gradcraft.backend.cuda import gemv
    from gradcraft.backend.cuda import launch as L

    bf16 = np.dtype("bfloat16")
    rng = np.random.default_rng(0)
    D = 768

    def draw(*shape, scale=1.0, shift=0.0):
        return cp.asarray(rng.standard_normal(shape, dtype=np.float32) * scale + shift).astype(bf16)

    layers = []
    for _ in range(args.layers):  # each layer its own weights: W comes from DRAM, as in the model
        weights = {"qkv": draw(3 * D, D, scale=D**-0.5), "o": draw(D, D, scale=D**-0.5)}
        weights.update(fc=draw(4 * D, D, scale=D**-0.5), proj=draw(D, 4 * D, scale=(4 * D) ** -0.5))
        biases = {k: draw(w.shape[0], scale=0.1) for k, w in weights.items()}
        norms = [(draw(D, scale=0.2, shift=1.0), draw(D, scale=0.1)) for _ in range(2)]
        layers.append((weights, biases, norms))
    x0, r0 = draw(1, D), draw(1, D)
    ln = dict(norm="layer_norm", eps=1e-5, norm_bias=True, bias=True)
    plain = dict(residual=False, norm=None, eps=1e-5, norm_bias=False, bias=True, activation=None)

    def fused():
        x, res = x0, r0
        for weights, biases, ((n1w, n1b), (n2w, n2b)) in layers:
            qkv, s = gemv.norm_linear(
                x, res, n1w, n1b, weights["qkv"], biases["qkv"], residual=True, activation=None, **ln
            )
            h = gemv.norm_linear(qkv[:, :D], weights["o"], biases["o"], **plain)
            a, s = gemv.norm_linear(
                h, s, n2w, n2b, weights["fc"], biases["fc"], residual=True, activation="gelu_tanh", **ln
            )
            x, res = gemv.norm_linear(a, weights["proj"], biases["proj"], **plain), s
        return x

    def plain_gemvs():
        x = x0
        for weights, _, _ in layers:
            for key, K in (("qkv", D), ("o", D), ("fc", D), ("proj", 4 * D)):
                w = weights[key]
                out = L.empty((1, w.shape[0]), bf16)
                gemv.gemv(x[:, :K], K, w, out, 1, w.shape[0], K)
                x = out
        return x

    launches = 4 * args.layers
    print(f"\nchain: {args.layers} gpt2-124m layers' products in sequence ({launches} dependent launches)")
    print(f"{'chain':8s} {'pdl':>3s} {'us/launch':>10s} {'us/layer':>9s}")
    results = {}
    for name, fn in (("fused", fused), ("gemv", plain_gemvs)):
        for mode in modes:
            set_pdl(mode)
            results[name, mode] = fn().view(np.uint16)
            if not bool((results[name, mode] == results[name, modes[0]]).all()):
                raise SystemExit(f"chain {name}: PDL {mode} changed the result's bits")
            per_chain = per_launch_us(fn)
            print(f"{name:8s} {mode:>3s} {per_chain / launches:10.2f} {per_chain / args.layers:9.2f}")


def kv_attention(per_launch_us):
    import cupy as cp
    import numpy as np

    from gradcraft.backend.cuda import kv_cache
    from gradcraft.backend.cuda import launch as L

    bf16 = np.dtype("bfloat16")
    print("\nKV-cache attention (one step, bf16, 12 heads of 64, a 1024-slot cache), us per launch")
    print(f"{'batch':>5s} {'filled':>6s} {'one block a head':>17s} {'split (merged in)':>17s}")
    for batch in (1, 8, 64):
        for filled in (16, 272, 1024):
            shape = (batch, 12, 1024, 64)
            k = cp.random.standard_normal(shape, dtype=np.float32).astype(bf16)
            v = cp.random.standard_normal(shape, dtype=np.float32).astype(bf16)
            q = cp.random.standard_normal((batch, 12, 1, 64), dtype=np.float32).astype(bf16)
            position = cp.array([filled - 1], dtype=np.int64)
            per_row = L.i32(0)

            def old():
                out = L.empty(q.shape, q.dtype)
                shared = kv_cache._shared_bytes(1024, q.dtype)
                fn = L.with_shared(kv_cache.FILE, "kv_attention_bf16", shared, kv_cache._STATIC_SHARED)
                args = (q, k, v, position, per_row, out, L.i32(12), L.i32(12), L.i64(1024), L.i32(64))
                fn((batch * 12,), (kv_cache.THREADS,), args + (np.float64(0.125),), shared_mem=shared)
                return out

            def split():
                return kv_cache._kv_attention_split(q, k, v, position, per_row, 0.125, 8)

            error = float(cp.abs(old().astype(np.float32) - split().astype(np.float32)).max())
            if error > 2e-2:
                raise SystemExit(f"kv attention: the kernels differ by {error:.1e}")
            print(f"{batch:5d} {filled:6d} {per_launch_us(old):17.2f} {per_launch_us(split):17.2f}")


def argmax(per_launch_us):
    import cupy as cp
    import numpy as np

    print("\nargmax over the vocabulary, us per launch")
    for rows, V, dtype in (
        (1, 32000, "float32"),
        (64, 32000, "float32"),
        (1, 50257, "float32"),
        (1, 50257, "bfloat16"),
    ):
        logits = cp.random.standard_normal((rows, V), dtype=np.float32).astype(np.dtype(dtype))
        from gradcraft.backend.cuda.reduce import KERNELS as reductions

        ours = reductions["argmax"]
        wide = logits.astype(np.float32)  # (CuPy's argmax, the check and the time beside ours, in float32)
        assert (ours(logits, -1, False) == cp.argmax(wide, axis=-1)).all()
        print(
            f"  {rows} x {V} {dtype}: ours {per_launch_us(lambda: ours(logits, -1, False)):6.2f}, "
            f"cupy.argmax (float32) {per_launch_us(lambda: cp.argmax(wide, axis=-1)):6.2f}"
        )


if __name__ == "__main__":
    main()
