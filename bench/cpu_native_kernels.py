"""The compiled C kernels (gradcraft/backend/cpu/native/kernels.c), one thread, against PyTorch CPU on
one thread, for several -march targets and optionally an older kernels.c: a before/after measure.

    python bench/cpu_native_kernels.py                                   # -march=native
    python bench/cpu_native_kernels.py --march x86-64-v3,native          # AVX2 code and this CPU's
    python bench/cpu_native_kernels.py --baseline old/kernels.c --baseline-flags "-O3 -fopenmp-simd -fno-math-errno"

Each build is compiled here with gcc (the repository's flags: compiler.py's; the baseline's:
--baseline-flags) and loaded with ctypes. All variants and PyTorch are called in turn, call by
call, so a burst of load from other processes hits them alike; each figure is the median of
--repeat calls in ms. Every build's output is checked against PyTorch's first (max abs error).
x86-64-v3 is the AVX2 + FMA level (Zen 2/3, Haswell on): code built for it runs on AVX-512 machines
too, so one machine can time both.
"""

import argparse
import ctypes
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))

from gradcraft.backend.cpu.native.compiler import _COMMON, SIGNATURES, SOURCE  # noqa: E402

P = ctypes.c_void_p


def build(source, march, flags, folder):
    out = os.path.join(folder, f"k{len(os.listdir(folder))}.so")
    subprocess.run(["gcc", f"-march={march}", *flags, source, "-o", out, "-lm"], check=True)
    lib = ctypes.CDLL(out)
    for name, argtypes in SIGNATURES.items():
        if hasattr(lib, name):
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = argtypes, None
    return lib


def ptr(a):
    return a.ctypes.data_as(P)


def cases(rows, cols, torch):
    """name -> (inputs, call(lib, inputs, out), torch function of the inputs, output shape)."""
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((rows, cols)) * 3).astype(np.float32)
    w = rng.standard_normal(cols).astype(np.float32)
    target = rng.integers(0, cols, rows).astype(np.int64)
    tx, tw, tt = torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(target)
    F = torch.nn.functional
    n = x.size
    return {
        "softmax": (lambda lib, o: lib.softmax_f32(ptr(x), ptr(o), cols, 0, rows), lambda: tx.softmax(-1), x.shape),
        "log_softmax": (
            lambda lib, o: lib.log_softmax_f32(ptr(x), ptr(o), cols, 0, rows),
            lambda: tx.log_softmax(-1),
            x.shape,
        ),
        "cross_entropy": (
            lambda lib, o: lib.cross_entropy_f32(ptr(x), ptr(target), ptr(o), cols, cols, -100, 0.0, 0, rows),
            lambda: F.cross_entropy(tx, tt, reduction="none"),
            (rows,),
        ),
        "silu": (lambda lib, o: lib.silu_f32(ptr(x), ptr(o), 0, n), lambda: F.silu(tx), x.shape),
        "gelu_tanh": (
            lambda lib, o: lib.gelu_f32(ptr(x), ptr(o), 1, 0, n),
            lambda: F.gelu(tx, approximate="tanh"),
            x.shape,
        ),
        "gelu_erf": (lambda lib, o: lib.gelu_f32(ptr(x), ptr(o), 0, 0, n), lambda: F.gelu(tx), x.shape),
        "rms_norm": (
            lambda lib, o: lib.rms_norm_f32(ptr(x), ptr(w), ptr(o), cols, 1e-6, 0, rows),
            lambda: F.rms_norm(tx, (cols,), tw, eps=1e-6),
            x.shape,
        ),
        "layer_norm": (
            lambda lib, o: lib.layer_norm_f32(ptr(x), ptr(w), None, ptr(o), cols, 1e-5, 0, rows),
            lambda: F.layer_norm(tx, (cols,), tw, None, eps=1e-5),
            x.shape,
        ),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--march", default="native", help="comma-separated -march targets (default native)")
    p.add_argument("--baseline", help="an older kernels.c to time too")
    p.add_argument("--baseline-flags", default=" ".join(_COMMON), help="its compiler flags (no -march)")
    p.add_argument("--rows", type=int, default=1024)
    p.add_argument("--cols", type=int, default=1024)
    p.add_argument("--repeat", type=int, default=50)
    p.add_argument("--median", action="store_true", help="report medians instead of minimums")
    p.add_argument("--only", help="comma-separated kernel names")
    args = p.parse_args()
    import torch

    torch.set_num_threads(1)

    variants = []  # (label, lib)
    with tempfile.TemporaryDirectory() as folder:
        for march in args.march.split(","):
            if args.baseline:
                variants.append((f"before {march}", build(args.baseline, march, args.baseline_flags.split(), folder)))
            variants.append((f"now {march}", build(str(SOURCE), march, _COMMON, folder)))
        table = cases(args.rows, args.cols, torch)
        names = args.only.split(",") if args.only else list(table)
        stat, stat_name = (statistics.median, "median") if args.median else (min, "fastest")
        print(
            f"{args.rows} x {args.cols} float32, one thread; {stat_name} ms of {args.repeat}; "
            f"torch {torch.__version__}; load {os.getloadavg()[0]:.1f}"
        )
        print("| kernel | torch ms | " + " | ".join(f"{label} ms (torch/ours)" for label, _ in variants) + " |")
        print("|---|---|" + "---|" * len(variants))
        for name in names:
            call, reference, shape = table[name]
            want = reference().numpy()
            outs = []
            for label, lib in variants:
                out = np.full(shape, np.nan, np.float32)
                call(lib, out)
                error = float(np.max(np.abs(out - want)))
                assert error < 1e-4 * max(1.0, float(np.abs(want).max())), f"{name} {label}: error {error}"
                outs.append(out)
            times = [[] for _ in range(len(variants) + 1)]
            for _ in range(args.repeat):
                start = time.perf_counter()
                reference()
                times[0].append(time.perf_counter() - start)
                for i, (label, lib) in enumerate(variants):
                    start = time.perf_counter()
                    call(lib, outs[i])
                    times[i + 1].append(time.perf_counter() - start)
            med = [stat(t) * 1e3 for t in times]
            print(
                f"| {name} | {med[0]:.2f} | " + " | ".join(f"{m:.2f} ({med[0] / m:.2f}x)" for m in med[1:]) + " |",
                flush=True,
            )


if __name__ == "__main__":
    main()
