"""Grouped-query attention's backward with each key tile's sweep split over 1, 2 .. G blocks.

    python bench/gqa_split.py                                    # the shapes below, bf16, causal
    python bench/gqa_split.py --shapes 8,32,4,2048,128 --parts 1,2,8

The warp-specialised fused backward (flash_hopper_bwd.cu, hopper_bwd_ws) gives each block one key tile
and sweeps the query tiles of the G query heads that share its key/value head, or of G / parts of them
when `parts` blocks share the tile (adding dk and dv up in float32, then converted). The backend picks
parts with flash_attention.kv_parts; here each split is asked for in turn (backward_launches' `parts`) and
the whole backward (its launches through the backend: dvec, the fused kernel, the conversions) is timed
with CUDA events, --rounds alternating rounds of --repeat calls per split, the median reported, beside
the default's pick and the largest relative difference of each split's dq, dk, dv from the first
split's (parts 1 unless --parts leaves it out). Needs a GPU of compute capability 9.0 (the wgmma
kernels). FLOPs: the backward's alone, 2.5x the causal forward's (bench/attention.py's count).
"""

import argparse
import os
import statistics
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))

SHAPES = (  # B, H, Hkv, T, D: G 2, 4 and 8 at head dims 128 and 64, T 1024-8192
    "8,16,4,2048,128;4,16,4,4096,128;2,16,4,8192,128;16,32,4,1024,128;8,32,4,2048,128;4,32,4,4096,128;"
    "8,16,8,2048,128;2,16,8,8192,128;8,16,4,2048,64;4,16,4,4096,64;2,16,4,8192,64;4,32,4,4096,64"
)


def rel_err(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def backward_flops(B, H, T, D) -> float:
    return 2.5 * 4 * B * H * D * T * T / 2


def run_shape(attention, cp, shape, parts_list, repeat, rounds):
    B, H, Hkv, T, D = shape
    G = H // Hkv
    bf16 = np.dtype("bfloat16")
    r = np.random.default_rng(0)
    q, k, v, g = (cp.asarray(r.standard_normal((B, h, T, D), dtype=np.float32).astype(bf16)) for h in (H, Hkv, Hkv, H))
    attrs = {"scale": D**-0.5, "causal": True, "window": None}
    out, lse = attention.flash_attention(q, k, v, **attrs)
    splits = sorted({p for p in (parts_list or (1, 2, G)) if G % p == 0})
    if not splits:
        print(f"B{B} H{H} Hkv{Hkv} T{T} D{D}: none of --parts divides G = {G}; skipped")
        return
    default = attention.kv_parts(G, D)
    calls, grads = {}, {}
    for parts in splits:
        grads[parts] = [cp.empty((B, a.shape[2], a.shape[1], D), dtype=bf16).transpose(0, 2, 1, 3) for a in (q, k, v)]
        launches = attention.backward_launches(q, k, v, out, lse, g, *grads[parts], **attrs, parts=parts)
        calls[parts] = list(launches.values())
    start, end = cp.cuda.Event(), cp.cuda.Event()
    times = {p: [] for p in splits}
    for parts in splits:  # warm-up
        for _ in range(3):
            for launch in calls[parts]:
                launch()
    for _ in range(rounds):
        for parts in splits:
            for _ in range(repeat):
                start.record()
                for launch in calls[parts]:
                    launch()
                end.record()
                end.synchronize()
                times[parts].append(cp.cuda.get_elapsed_time(start, end))
    base = [cp.asnumpy(a) for a in grads[splits[0]]]
    for parts in splits:
        ms = statistics.median(times[parts])
        err = max(rel_err(cp.asnumpy(a), b) for a, b in zip(grads[parts], base))
        mark = "  <- kv_parts" if parts == default else ""
        print(
            f"B{B:<3d} H{H:<3d} Hkv{Hkv:<3d} T{T:<5d} D{D:<4d} G{G:<2d} parts {parts:<2d} {ms:8.3f} ms "
            f"{backward_flops(B, H, T, D) / ms / 1e9:5.0f} TFLOP/s  vs parts {splits[0]}: {err:.1e}{mark}"
        )
    sys.stdout.flush()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default=SHAPES, help="B,H,Hkv,T,D;... (default: %(default)s)")
    p.add_argument("--parts", default="", help="splits to time, e.g. 1,2,4 (default: 1, 2 and G)")
    p.add_argument("--repeat", type=int, default=10, help="timed calls per split and round")
    p.add_argument("--rounds", type=int, default=5, help="alternating rounds")
    args = p.parse_args(argv)
    try:
        shapes = [tuple(int(x) for x in s.split(",")) for s in args.shapes.split(";") if s.strip()]
        parts_list = [int(x) for x in args.parts.split(",") if x.strip()]
        if any(len(s) != 5 or min(s) < 1 or s[1] % s[2] for s in shapes) or min(parts_list, default=1) < 1:
            raise ValueError
    except ValueError:
        print("error: --shapes takes B,H,Hkv,T,D;... (H a multiple of Hkv), --parts positive integers", file=sys.stderr)
        return 2
    if any(s[4] not in (64, 128) for s in shapes) or args.repeat < 1 or args.rounds < 1:
        print("error: head dims 64 and 128 only (the split kernel's); --repeat, --rounds >= 1", file=sys.stderr)
        return 2
    try:
        import cupy as cp

        from gradcraft.backend.cuda import flash_attention
    except ImportError as e:
        print(f"error: needs CuPy and a CUDA GPU ({e})", file=sys.stderr)
        return 2
    if not flash_attention.hopper(np.dtype("bfloat16"), 128):
        print("error: the split applies to the wgmma kernels: a GPU of compute capability 9.0", file=sys.stderr)
        return 2
    print(cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"].decode())
    for shape in shapes:
        run_shape(flash_attention, cp, shape, parts_list, args.repeat, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
