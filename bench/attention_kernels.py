"""Flash attention kernel by kernel: forward, dq and dk/dv times and TFLOP/s on the GPU.

    python bench/attention_kernels.py                 # causal, B*T = 16384, 1024 wide, T 512..8192
    python bench/attention_kernels.py --seqs 1024 --dims 64 --heads 12 --batch 16   # gpt2-124m's layer

Each kernel is launched through the backend (no engine, no Python graph) and timed with CUDA events:
the median of --repeat launches after 3, inputs bf16. FLOPs as FlashAttention counts them for causal
attention: forward 2 products, dq 3, dk/dv 4 (the backward recomputes the scores in both kernels),
each 2 * B * H * D * T * T / 2. PyTorch's SDPA forward and forward+backward are timed beside them
(before and after ours, the median over both sets, so that drift on a shared machine falls on both),
and every kernel variant of the forward and of dq and dk/dv (mma.sync, and on an H100/H200 wgmma at
each tile size of dev/cuda/flash_variants.py's HOPPER_VARIANTS, launched from the lab's kernel files,
dev/cuda/lab.py, which hold the package's kernels too) on its own line below.
"""

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))


def fastest(times: dict, default) -> str:
    """The fastest of `times` (name -> seconds), against `default` (the name of the variant the backend
    runs, or None when it is not among them): what to look at before changing flash_variants.HOPPER_TILES."""
    name = min(times, key=times.get)
    text = f"{name} {times[name] * 1e3:.3f} ms"
    if default in times:
        text += f" ({times[default] / times[name]:.2f}x the default, {default})"
    return text


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seqs", default="512,1024,2048,4096,8192")
    p.add_argument("--dims", default="64,128")
    p.add_argument("--tokens", type=int, default=16384, help="B * T (when --batch is not given)")
    p.add_argument("--width", type=int, default=1024, help="H * D (when --heads is not given)")
    p.add_argument("--batch", type=int, default=None)
    p.add_argument("--heads", type=int, default=None)
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--forward_only", action="store_true", help="time the forward kernels only (and SDPA's)")
    args = p.parse_args(argv)

    import cupy as cp
    import numpy as np
    import torch

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "dev", "cuda"))
    import lab
    from flash_variants import HOPPER_VARIANTS

    attention = lab.enable()  # (every variant, the lab's with the package's)

    def timed(fn) -> float:
        for _ in range(3):
            fn()
        times = []
        for _ in range(args.repeat):
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(cp.cuda.get_elapsed_time(start, end) * 1e-3)
        return statistics.median(times)

    def torch_samples(fn) -> list:
        for _ in range(3):
            fn()
        times = []
        for _ in range(args.repeat):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e-3)
        return times

    print(
        f"{'T':>5s} {'D':>4s} {'B':>3s} {'H':>3s} | {'fwd':>13s} {'dot':>6s} {'dq':>13s} {'dkdv':>13s} | "
        f"{'torch fwd':>13s} {'torch f+b':>13s}   (ms and TFLOP/s)"
    )
    for D in (int(d) for d in args.dims.split(",")):
        for T in (int(t) for t in args.seqs.split(",")):
            B = args.batch or max(1, args.tokens // T)
            H = args.heads or args.width // D
            rng = cp.random.default_rng(0)
            q, k, v, g = (rng.standard_normal((B, H, T, D), dtype=np.float32).astype("bfloat16") for _ in range(4))
            attrs = {"scale": D**-0.5, "causal": True, "window": None}
            out, lse = attention.flash_attention(q, k, v, **attrs)
            tq, tk, tv, tg = (
                torch.as_tensor(a, device="cuda").requires_grad_(True)
                for a in (q.astype(np.float32), k.astype(np.float32), v.astype(np.float32), g.astype(np.float32))
            )
            tq, tk, tv, tg = (x.detach().to(torch.bfloat16).requires_grad_(True) for x in (tq, tk, tv, tg))
            sdpa = torch.nn.functional.scaled_dot_product_attention

            def sdpa_fwd():
                return sdpa(tq, tk, tv, is_causal=True)

            def sdpa_all():
                sdpa(tq, tk, tv, is_causal=True).backward(tg)

            torch_fwd, torch_all = torch_samples(sdpa_fwd), torch_samples(sdpa_all)
            unit = 2 * B * H * D * T * T / 2  # one product over the causal half
            t_fwd = timed(lambda: attention.flash_attention(q, k, v, **attrs))
            # the forward's kernels side by side: mma.sync (flash_attention.cu), and on sm_90 the wgmma
            # kernel (flash_hopper.cu) at each key-tile size
            os.environ["GRADCRAFT_HOPPER_ATTENTION"] = "0"
            forwards = {"mma.sync": timed(lambda: attention.flash_attention(q, k, v, **attrs))}
            os.environ.pop("GRADCRAFT_HOPPER_ATTENTION")
            default_fwd = "mma.sync"  # (the variant the backend runs: the wgmma default on sm_90)
            if attention.hopper(q.dtype, D):
                o2, l2 = cp.empty_like(out), cp.empty_like(lse)
                strides = [[np.int64(s // a.itemsize) for s in a.strides[:3]] for a in (q, k, v)]
                for tiles in HOPPER_VARIANTS["fwd"][D]:

                    def run(tiles=tiles):
                        attention._hopper_fwd(q, k, v, o2, l2, *strides, attrs["scale"], True, None, tiles=tiles)

                    label = f"wgmma n{tiles[0]} w{tiles[1]}{''.join(' ' + x for x in tiles[2:])}"
                    forwards[label] = timed(run)
                    if tiles == attention.HOPPER_TILES["fwd"][D]:
                        default_fwd = label
            if args.forward_only:
                tt_fwd = statistics.median(torch_fwd + torch_samples(sdpa_fwd))
                print(f"{T:5d} {D:4d} {B:3d} {H:3d} | SDPA fwd {tt_fwd * 1e3:6.3f} ms {2 * unit / tt_fwd / 1e12:5.0f}T")
                for name, t in forwards.items():
                    print(f"      {name:28s} {t * 1e3:6.3f} ms {2 * unit / t / 1e12:5.0f}T  {tt_fwd / t:5.2f}x SDPA")
                print(f"      fastest forward: {fastest(forwards, default_fwd)}")
                continue
            t_all = timed(lambda: attention.flash_attention_backward(q, k, v, out, lse, g, **attrs))
            # the backward's kernels one at a time, through the launcher's own pieces
            grads = [cp.empty_like(a) for a in (q, k, v)]
            launches = attention.backward_launches(q, k, v, out, lse, g, *grads, **attrs)
            t_parts = {name: timed(launch) for name, launch in launches.items()}
            # (the default backward fused: "dq" is the conversion of dk/dv's float32 dQ sums)
            fused_variants = (attention.FUSED, attention.FUSED_OVERLAP)
            fused = attention.hopper(q.dtype, D) and attention.HOPPER_TILES["dq"].get(D) in fused_variants
            # the backward's dq and dk/dv side by side: mma.sync, and on sm_90 wgmma at each tile size
            # (keys per dq tile, queries per dk/dv tile)
            os.environ["GRADCRAFT_HOPPER_ATTENTION"] = "0"
            old = attention.backward_launches(q, k, v, out, lse, g, *grads, **attrs)
            os.environ.pop("GRADCRAFT_HOPPER_ATTENTION")
            backwards = {"mma.sync": (timed(old["dq"]), timed(old["dkdv"]), 3, 4)}
            default_bwd = "mma.sync"
            if attention.hopper(q.dtype, D):
                default_tiles = (attention.HOPPER_TILES["dq"].get(D), attention.HOPPER_TILES["dkdv"].get(D))
                for tiles in zip(HOPPER_VARIANTS["dq"][D], HOPPER_VARIANTS["dkdv"][D]):
                    new = attention.backward_launches(q, k, v, out, lse, g, *grads, **attrs, tiles=tiles)
                    m, wk, *rest = tiles[1]  # (blocks an SM the registers are capped for, stages)
                    if tiles[0] in fused_variants:  # dk/dv adds dQ up (5 products); "dq" converts it
                        if rest == [attention.WARP_SPECIALIZED]:  # a producer warpgroup beside wk consumers
                            capped = " ws"
                        else:  # (blocks an SM the registers are capped for, stages)
                            capped = "".join(f" {x}{n}" for x, n in zip("bs", rest))
                        zeroing = timed(new["dot"]) * 1e3
                        label = f"wgmma {tiles[0]} m{m} w{wk}{capped} (dot + zeroing {zeroing:.3f}; convert, dk/dv)"
                        backwards[label] = (timed(new["dq"]), timed(new["dkdv"]), 0, 5)
                    else:
                        label = f"wgmma n{tiles[0][0]} w{tiles[0][1]} / m{m} w{wk}"
                        backwards[label] = (timed(new["dq"]), timed(new["dkdv"]), 3, 4)
                    if tiles == default_tiles:
                        default_bwd = label
            # SDPA timed before and after ours, its medians over both sets: a shared machine's drift
            # over the minutes between falls on both sides
            tt_fwd = statistics.median(torch_fwd + torch_samples(sdpa_fwd))
            tt_all = statistics.median(torch_all + torch_samples(sdpa_all))

            def cell(seconds, products):
                return f"{seconds * 1e3:6.3f} {products * unit / seconds / 1e12:5.0f}T"

            print(
                f"{T:5d} {D:4d} {B:3d} {H:3d} | {cell(t_fwd, 2)} {t_parts['dot'] * 1e3:6.3f} "
                f"{cell(t_parts['dq'], 0 if fused else 3)} {cell(t_parts['dkdv'], 5 if fused else 4)} | "
                f"{cell(tt_fwd, 2)} {cell(tt_all, 7)}"
                f"   ours f+b {cell(t_fwd + t_all, 9)}"
            )
            print("      forward kernels: " + ", ".join(f"{name} {cell(t, 2)}" for name, t in forwards.items()))
            print(
                "      dq, dk/dv kernels: "
                + ", ".join(f"{name} {cell(a, pa)} {cell(b, pb)}" for name, (a, b, pa, pb) in backwards.items())
            )
            pairs = {name: a + b for name, (a, b, _, _) in backwards.items()}  # (the dot kernel: the same for all)
            print(f"      fastest forward: {fastest(forwards, default_fwd)}")
            print(f"      fastest dq + dk/dv: {fastest(pairs, default_bwd)}")


if __name__ == "__main__":
    sys.exit(main())
