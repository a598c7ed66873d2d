"""`gradcraft prebuild`: compile the CUDA kernels into the kernel cache ahead of time.

    gradcraft prebuild --device cuda                 # on the GPU machine (e.g. in its image's build step)
    gradcraft prebuild --arch sm_90 --nvrtc LIB.so   # on a machine without a GPU, for H100/H200s

A first GPU run otherwise compiles them itself (a minute on a fresh H100, with one line saying so); the
cache (GRADCRAFT_KERNEL_CACHE, default ~/.cache/gradcraft/kernels) is keyed by each kernel's source text,
target and NVRTC version, so it serves later runs and later gradcraft versions whose kernels are unchanged.
"""

import importlib.util
import os
import time

from gradcraft.cli.common import positive_int
from gradcraft.errors import UserError


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "prebuild",
        help="compile the GPU kernels into the kernel cache ahead of time",
        description="Compile every CUDA kernel file the kernel cache lacks (in parallel), so that the first "
        "GPU run starts at once: for this machine's GPU (--device cuda, needs CuPy), or for an architecture "
        "without a GPU (--arch sm_90, with an NVRTC library of the GPU machine's CUDA version).",
    )
    p.add_argument("--device", default=None, help="the GPU to build for: cuda or cuda:N (default: cuda)")
    p.add_argument("--arch", default=None, help="build for this target without a GPU, e.g. sm_90 (default: none)")
    p.add_argument("--nvrtc", default=None, help="with --arch: the NVRTC library (default: the one found here)")
    p.add_argument("--out", default=None, help="the cache folder (default: GRADCRAFT_KERNEL_CACHE, else ~/.cache)")
    p.add_argument("--files", default=None, help="kernel files, comma separated (default: all)")
    p.add_argument("--workers", type=positive_int, default=None, help="parallel compiles (default: the CPU count)")
    p.set_defaults(func=run)


def run(args) -> int:
    import gradcraft.cuda as gcuda

    if args.device is not None and args.arch is not None:
        raise UserError("give --device (build for this machine's GPU) or --arch (build without one), not both")
    if args.arch is None:
        device = args.device or "cuda"
        if not device.startswith("cuda"):
            raise UserError(f"--device {device}: prebuild compiles the GPU's kernels; give --device cuda or cuda:N")
        if importlib.util.find_spec("cupy") is None:
            raise UserError(
                "prebuild --device cuda needs CuPy and a GPU, and CuPy is not installed here: pip install "
                "'gradcraft[cuda]'; without a GPU, build for an architecture with --arch sm_90"
            )
        from gradcraft.device import parse_device

        device = parse_device(device)  # a GPU this machine lacks: one line
    elif args.nvrtc is not None and not os.path.isfile(args.nvrtc):
        raise UserError(f"--nvrtc {args.nvrtc} does not exist; give the path of libnvrtc.so.N")
    if args.out:
        os.environ["GRADCRAFT_KERNEL_CACHE"] = os.path.abspath(args.out)
    files = [f for f in args.files.split(",") if f] if args.files else None
    start = time.perf_counter()
    built, total = gcuda.prebuild(
        device=None if args.arch else device, arch=args.arch, nvrtc=args.nvrtc, files=files, workers=args.workers
    )
    where = os.environ.get("GRADCRAFT_KERNEL_CACHE") or "~/.cache/gradcraft/kernels"
    if built:
        print(f"built {built} of {total} kernels in {time.perf_counter() - start:.1f} s into {where}")
    else:
        print(f"the kernel cache {where} already holds all {total} kernels")
    return 0
