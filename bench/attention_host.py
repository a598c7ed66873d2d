"""The host's cost of an eager attention call on a GPU, piece by piece (microseconds a call).

    python bench/attention_host.py                  # head dims 64 and 128, bf16, CUDA
    python bench/attention_host.py --dims 64 --calls 500

bench/attention.py times whole calls against PyTorch; at short sequences those are host-bound (the
device waits for our Python between the forward and the backward), and this script says where that
host time goes. Shapes are tiny (B1 H2 T128 by default), so that every kernel finishes long before
the host has issued the next and the times below are the host's alone. Each line is the median over
--batches batches of --calls calls, the device synchronised before and after each batch. Sections:

- cupy: the CuPy calls a launcher makes (allocation, array construction, device and stream queries);
- launch: one forward kernel launched by CuPy's kernel call (its 30-odd arguments NumPy scalars, the
  path CuPy's own launch path), by packed.launch (every argument packed into one buffer)
  and by a prepared packed.Launch (only the pointers packed: the launchers' path);
- launchers: backend/cuda/flash_attention.py's forward and backward (every launch of a call);
- engine: gradcraft's scaled_dot_product_attention on tensors, building the graph, realizing it,
  then the backward, then the whole call with a synchronisation; PyTorch's whole call beside it.
"""

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAB_FWD_FILE = os.path.join(ROOT, "dev", "cuda", "flash_hopper_lab.cu")  # (the lab's forward variants)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda", help="cuda or cuda:N (default: %(default)s)")
    p.add_argument("--dims", default="64,128", help="head dimensions (default: %(default)s)")
    p.add_argument("--batch", type=int, default=1, help="B (default: %(default)s)")
    p.add_argument("--heads", type=int, default=2, help="H (default: %(default)s)")
    p.add_argument("--seq", type=int, default=128, help="T (default: %(default)s)")
    p.add_argument("--calls", type=int, default=200, help="calls per batch (default: %(default)s)")
    p.add_argument("--batches", type=int, default=7, help="batches per line (default: %(default)s)")
    return p.parse_args(argv)


def per_call_us(fn, calls: int, batches: int, sync) -> float:
    """Median over batches of the microseconds a call of fn takes, `calls` calls a batch."""
    for _ in range(3):
        fn()
    sync()
    samples = []
    for _ in range(batches):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - t0) / calls * 1e6)
        sync()
    return statistics.median(samples)


def run(args) -> None:
    import cupy as cp

    import gradcraft as gc
    import gradcraft.nn.functional as F
    from gradcraft.backend.cuda import flash_attention, compiler, packed

    device = gc.device.canonical(args.device)
    backend = gc.device.get_backend(device)
    sync = backend.synchronize

    def line(section, name, fn):
        print(f"{section:10s} {name:58s} {per_call_us(fn, args.calls, args.batches, sync):8.2f} us", flush=True)

    B, H, T = args.batch, args.heads, args.seq
    print(f"host time per call; {device}; B{B} H{H} T{T} bf16; median of {args.batches} batches of {args.calls} calls")
    with backend._device:
        bf16 = np.dtype("bfloat16")
        line("cupy", "cupy.empty((B, T, H, 64))", lambda: cp.empty((B, T, H, 64), bf16))
        line(
            "cupy",
            "cupy.empty((B, T, H, 64)).transpose(0, 2, 1, 3)",
            lambda: cp.empty((B, T, H, 64), bf16).transpose(0, 2, 1, 3),
        )
        line(
            "cupy",
            "cupy.ndarray(shape, memptr=cupy.cuda.alloc(n), strides)",
            lambda: flash_attention._seq_major((B, H, T, 64), bf16),
        )
        line("cupy", "cupy.cuda.alloc(n)", lambda: cp.cuda.alloc(B * H * T * 64 * 2))
        line("cupy", "cupy.cuda.Device().id", lambda: cp.cuda.Device().id)
        line("cupy", "cupy.cuda.runtime.getDevice()", cp.cuda.runtime.getDevice)
        line("cupy", "cupy.cuda.get_current_stream().ptr", lambda: cp.cuda.get_current_stream().ptr)
        line("cupy", "with device: (backend.run's)", lambda: backend._device.__enter__() or backend._device.__exit__())

        for D in (int(d) for d in args.dims.split(",")):
            gc.manual_seed(0)
            q, k, v, g = (gc.randn(B, H, T, D, device=device, dtype=gc.bfloat16).realize() for _ in range(4))
            a_q, a_k, a_v, a_g = (t._buf for t in (q, k, v, g))  # (the benchmark reads the buffers it launches on)
            attrs = {"scale": D**-0.5, "causal": True, "window": None}
            out, lse = flash_attention.flash_attention(a_q, a_k, a_v, **attrs)
            if flash_attention.hopper(a_q.dtype, D):
                # a non-persistent forward, so both launch paths get the same arguments (at head dim 128
                # a lab variant: dev/cuda/flash_hopper_lab.cu, which holds the package's kernels too)
                block_n, wgs = flash_attention.HOPPER_TILES["fwd"][D][:2]
                name, threads, shared = flash_attention.hopper_fwd_kernel(bf16, D, (block_n, wgs))
                handle = flash_attention._function(LAB_FWD_FILE, name, shared)
                function = compiler.hopper_function(LAB_FWD_FILE, name, cp.cuda.runtime.getDevice())
                grid = (-(-T // (64 * wgs)), B * H)
                strides = [s for a in (a_q, a_k, a_v, out) for s in flash_attention._strides(a)]
                shape = flash_attention._shape_args(a_q, a_k, attrs["scale"], True, None)
                pointers = [a.data.ptr for a in (a_q, a_k, a_v, out, lse)]
                numpy_args = (a_q, a_k, a_v, out, lse, *(np.int64(s) for s in strides))
                numpy_args += tuple(np.int32(x) if isinstance(x, int) else np.float32(x) for x in shape)
                packed_values = (*pointers, *strides, *shape)
                line(
                    f"launch d{D}",
                    f"CuPy kernel call ({len(numpy_args)} arguments)",
                    lambda: function(grid, (threads,), numpy_args, shared_mem=shared),
                )
                line(
                    f"launch d{D}",
                    "packed.launch",
                    lambda: packed.launch(handle, grid, threads, shared, flash_attention.FWD_TYPES, packed_values),
                )
                prepared = packed.Launch(handle, grid, threads, shared, flash_attention.FWD_TYPES, packed_values[5:])
                line(f"launch d{D}", "packed.Launch (prepared: the pointers only)", lambda: prepared(*pointers))
            line(f"launchers d{D}", "attention._rows(q)", lambda: flash_attention._rows(a_q))
            line(f"launchers d{D}", "attention.hopper(dtype, D)", lambda: flash_attention.hopper(a_q.dtype, D))
            line(f"launchers d{D}", "flash_attention", lambda: flash_attention.flash_attention(a_q, a_k, a_v, **attrs))
            grads = [flash_attention._seq_major(a.shape, a.dtype) for a in (a_q, a_k, a_v)]
            line(
                f"launchers d{D}",
                "backward_launches (the backward's arguments, not launched)",
                lambda: flash_attention.backward_launches(a_q, a_k, a_v, out, lse, a_g, *grads, **attrs),
            )
            line(
                f"launchers d{D}",
                "flash_attention_backward",
                lambda: flash_attention.flash_attention_backward(a_q, a_k, a_v, out, lse, a_g, **attrs),
            )

            for t in (q, k, v):
                t.requires_grad_(True)

            def build():
                q.grad = k.grad = v.grad = None
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)

            def forward():
                return build().realize()

            def call():
                forward().backward(g)

            def call_sync():
                call()
                sync()

            line(f"engine d{D}", "build (scaled_dot_product_attention)", build)
            line(f"engine d{D}", "build + realize", forward)
            line(f"engine d{D}", "build + realize + backward", call)
            line(f"engine d{D}", "whole call, synchronised", call_sync)
            try:
                import torch
            except ImportError:
                continue
            tq, tk, tv = (
                torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3)
            )
            tg = torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16)

            def torch_call():
                tq.grad = tk.grad = tv.grad = None
                torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=True).backward(tg)

            def torch_sync():
                torch_call()
                torch.cuda.synchronize()

            line(f"torch d{D}", "forward + backward", torch_call)
            line(f"torch d{D}", "whole call, synchronised", torch_sync)


def main(argv=None) -> int:
    args = parse_args(argv)
    for name in ("batch", "heads", "seq", "calls", "batches"):
        if getattr(args, name) < 1:
            print(f"error: --{name} must be at least 1, got {getattr(args, name)}", file=sys.stderr)
            return 2
    if not args.device.startswith("cuda"):
        print("error: bench/attention_host.py times the CUDA launch path; use --device cuda or cuda:N", file=sys.stderr)
        return 2
    try:
        import cupy  # noqa: F401
    except ImportError:
        print(
            "error: CuPy is not installed; install gradcraft's cuda extra (pip install 'gradcraft[cuda]')",
            file=sys.stderr,
        )
        return 2
    run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
