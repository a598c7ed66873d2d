"""The reference check of the lab's Hopper flash-attention variants: each forward and backward variant
of flash_variants.HOPPER_VARIANTS that the package does not run (lab_only), on an H100 or H200,
against gradcraft's NumPy reference kernels (backend/cpu/flash_attention.py) and the package's
mma.sync kernels, every output element written (outputs start as NaN). A persistent forward must also
give the same bits from a grid of one or two blocks. (The variants the package runs are tested by
tests/test_cuda_attention.py.)

    python dev/cuda/check_flash_hopper.py                  # every lab variant, bf16 and fp16
    python dev/cuda/check_flash_hopper.py --kernel fwd --dim 64 --dtype bf16

Prints a line a variant and case; exit status 1 if any fails.
"""

import argparse
import os
import sys

import lab
import numpy as np

# (B, H, Hkv, T, S, D, causal, window): the wgmma kernels' head dims, ragged tiles, GQA, windows, T > S
CASES = [
    (2, 4, 4, 128, 128, 64, True, None),
    (1, 4, 2, 300, 300, 64, True, None),
    (1, 4, 1, 77, 77, 128, True, None),
    (1, 2, 2, 513, 513, 128, True, 200),
    (1, 3, 3, 33, 260, 64, True, None),
    (1, 2, 2, 1, 150, 128, True, None),
    (1, 2, 2, 190, 70, 64, True, None),
    (1, 2, 1, 257, 257, 128, False, None),
    (1, 2, 2, 129, 129, 64, False, 16),
    (1, 2, 2, 300, 40, 128, True, None),
    (1, 2, 2, 300, 40, 64, True, None),
]


def rel_err(got, expected) -> float:
    got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    if not np.isfinite(got).all():
        return float("inf")  # an unwritten (NaN-poisoned) or corrupted element
    return float(np.linalg.norm(got - expected) / max(np.linalg.norm(expected), 1e-30))


def inputs(case, dtype, r):
    B, H, Hkv, T, S, D, causal, window = case
    q, k, v = (r.standard_normal(s).astype(dtype) for s in ((B, H, T, D), (B, Hkv, S, D), (B, Hkv, S, D)))
    g = r.standard_normal((B, H, T, D)).astype(dtype)
    return q, k, v, g, {"scale": 1 / np.sqrt(D), "causal": causal, "window": window}


def check_forward(attention, cpu, cp, case, dtype, tiles, r) -> list:
    """Errors of variant `tiles` on `case` (empty: it passed)."""
    B, H, Hkv, T, S, D, causal, window = case
    q, k, v, _, attrs = inputs(case, dtype, r)
    ref_out, ref_lse = cpu.reference_kernels["flash_attention"](q, k, v, **attrs)
    dq, dk, dv = (cp.asarray(a) for a in (q, k, v))
    strides = [[np.int64(s // a.itemsize) for s in a.strides[:3]] for a in (dq, dk, dv)]

    def run(blocks=None):
        out = cp.full((B, T, H, D), np.nan, dtype=np.float32).astype(dtype).transpose(0, 2, 1, 3)
        lse = cp.full((B, H, T), np.nan, dtype=np.float32)
        attention._hopper_fwd(dq, dk, dv, out, lse, *strides, attrs["scale"], causal, window, tiles, blocks)
        return cp.asnumpy(out), cp.asnumpy(lse)

    out, lse = run()
    errors, limit = [], 1e-2 if dtype != np.float16 else 2e-3
    if rel_err(out, ref_out) >= limit:
        errors.append(f"out: relative error {rel_err(out, ref_out):.2e} against the reference")
    visible = np.isfinite(ref_lse)
    if not (np.array_equal(np.isfinite(lse), visible) and np.allclose(lse[visible], ref_lse[visible], 1e-3, 1e-3)):
        errors.append("lse differs from the reference")
    if tiles[2:] and tiles[2] in attention.PERSISTENT_KINDS:
        for blocks in (1, 2):
            out2, lse2 = run(blocks)
            if not (np.array_equal(out2.view(np.uint16), out.view(np.uint16)) and np.array_equal(lse2, lse)):
                errors.append(f"a grid of {blocks} block(s) gives other bits")
    old, _ = _mma(attention, dq, dk, dv, attrs)
    if rel_err(out, cp.asnumpy(old)) >= limit:
        errors.append("out differs from the mma.sync kernel's")
    return errors


def _mma(attention, q, k, v, attrs):
    os.environ["GRADCRAFT_HOPPER_ATTENTION"] = "0"  # the mma.sync kernel, for a second opinion
    try:
        return attention.flash_attention(q, k, v, **attrs)
    finally:
        os.environ.pop("GRADCRAFT_HOPPER_ATTENTION")


def check_backward(attention, cpu, cp, case, dtype, tiles, r) -> list:
    B, H, Hkv, T, S, D, causal, window = case
    q, k, v, g, attrs = inputs(case, dtype, r)
    ref_out, ref_lse = cpu.reference_kernels["flash_attention"](q, k, v, **attrs)
    expected = cpu.reference_kernels["flash_attention_backward"](q, k, v, ref_out, ref_lse, g, **attrs)
    args = [cp.asarray(a) for a in (q, k, v, ref_out, ref_lse, g)]
    shapes = [(a.shape[0], a.shape[2], a.shape[1], a.shape[3]) for a in args[:3]]
    grads = [cp.full(s, np.nan, dtype=np.float32).astype(dtype).transpose(0, 2, 1, 3) for s in shapes]
    for launch in attention.backward_launches(*args, *grads, attrs["scale"], causal, window, tiles=tiles).values():
        launch()
    errors, limit = [], 2e-2 if dtype != np.float16 else 4e-3
    for name, a, e in zip(("dq", "dk", "dv"), grads, expected):
        if rel_err(cp.asnumpy(a), e) >= limit:
            errors.append(f"{name}: relative error {rel_err(cp.asnumpy(a), e):.2e} against the reference")
    os.environ["GRADCRAFT_HOPPER_ATTENTION"] = "0"  # the mma.sync kernels, for a second opinion
    try:
        old = attention.flash_attention_backward(*args, **attrs)
    finally:
        os.environ.pop("GRADCRAFT_HOPPER_ATTENTION")
    for name, a, e in zip(("dq", "dk", "dv"), grads, old):
        if rel_err(cp.asnumpy(a), cp.asnumpy(e)) >= limit:
            errors.append(f"{name} differs from the mma.sync kernels'")
    return errors


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernel", choices=("fwd", "bwd"), action="append", help="default: both")
    parser.add_argument("--dim", type=int, choices=(64, 128), action="append", help="default: both")
    parser.add_argument("--dtype", choices=("bf16", "fp16"), action="append", help="default: both")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    import cupy as cp

    import flash_variants
    from gradcraft.device import get_backend

    attention = lab.enable()
    cpu = get_backend("cpu")
    dtypes = {"bf16": np.dtype("bfloat16"), "fp16": np.dtype(np.float16)}
    failed = 0
    for kernel in args.kernel or ("fwd", "bwd"):
        check = check_forward if kernel == "fwd" else check_backward
        for D in args.dim or (64, 128):
            if not attention.hopper(np.float16, D):
                print("error: the wgmma kernels need an H100 or H200 (compute capability 9.0)", file=sys.stderr)
                return 2
            for tiles in flash_variants.lab_only(kernel, D):
                for dtype_name in args.dtype or ("bf16", "fp16"):
                    for case in (c for c in CASES if c[5] == D):
                        r = np.random.default_rng(args.seed)
                        errors = check(attention, cpu, cp, case, dtypes[dtype_name], tiles, r)
                        failed += bool(errors)
                        status = "ok" if not errors else "FAIL " + "; ".join(errors)
                        print(f"{kernel} d{D} {tiles} {dtype_name} {case}: {status}", flush=True)
    print(f"{failed} failed", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
