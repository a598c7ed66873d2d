"""Compile a lab kernel file (or a package one) with NVRTC, as gradcraft compiles its kernels, and list
its kernels; no GPU or CuPy needed, only the NVRTC library (pip install nvidia-cuda-nvrtc-cu12).

    python dev/cuda/build.py flash_hopper_lab.cu               # PTX for sm_90a, its kernels listed
    python dev/cuda/build.py flash_hopper_bwd_lab.cu --ptxas   # machine code: registers, spills, and
                                                               # ptxas's wgmma serialisation warnings
    python dev/cuda/build.py flash_hopper_lab.cu --arch sm_90 --out lab.ptx

A file here is looked up beside this script, then in gradcraft/backend/cuda/kernels/; its local
includes come from kernels/ (compiler.expand), so a lab file includes the package file it extends.
Exit status 1 where ptxas reports a serialised wgmma (C7512-C7514), as tests/test_cuda_compile.py
checks for the package's files.
"""

import argparse
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "src"))

from gradcraft.backend.cuda import compiler  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", help="a .cu file of dev/cuda or of gradcraft/backend/cuda/kernels")
    parser.add_argument("--arch", default=compiler.HOPPER_ARCH, help="target (default sm_90a)")
    parser.add_argument("--ptxas", action="store_true", help="build machine code and print ptxas's report")
    parser.add_argument("--out", help="write the PTX here")
    args = parser.parse_args(argv)
    path = HERE / args.file if (HERE / args.file).is_file() else compiler.KERNEL_DIR / args.file
    if not path.is_file():
        print(f"error: no {args.file} in {HERE} or {compiler.KERNEL_DIR}", file=sys.stderr)
        return 2
    text = compiler.expand(path.read_text())
    if args.ptxas:
        log = compiler.ptxas_report(text, path.name, args.arch)
        print(log)
        return 1 if any(c in log for c in ("C7512", "C7513", "C7514")) else 0
    ptx = compiler.nvrtc_compile(text, path.name, args.arch).decode()
    if args.out:
        Path(args.out).write_text(ptx)
    kernels = re.findall(r"^\.visible \.entry (\w+)\(", ptx, re.M)
    print("\n".join(kernels))
    print(f"{path.name}: {len(kernels)} kernels for {args.arch}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
