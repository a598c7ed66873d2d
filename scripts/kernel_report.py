"""Each kernel's registers, spills and (with --nvdisasm) lines of machine code, on a machine without a GPU.

    python scripts/kernel_report.py --nvrtc /path/to/libnvrtc.so.13 --nvdisasm /path/to/nvdisasm \
        --files flash_hopper_bwd.cu --kernels bf16_d64

The kernel files are built as the GPU machine builds them (compiler.nvrtc_cubin: the Hopper files for
sm_90a, the others for --arch), ptxas's verbose report gives each kernel's registers and spilled bytes,
and nvdisasm (the nvidia-cuda-nvdisasm wheel's, or CUDA's) counts the lines of each kernel's SASS. Run on
two checkouts, it gives the before and after of a kernel change; it also
prints ptxas's warnings that a kernel's wgmma products were serialised (C7512-C7514).
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))

from gradcraft.backend.cuda import compiler  # noqa: E402
from prebuild_kernels import nvrtc_and_files  # noqa: E402  (the same --nvrtc and --files)

SERIALISED = ("C7512", "C7513", "C7514")


def ptxas_table(log: str) -> dict:
    """kernel -> (registers, spill stores, spill loads) from ptxas's verbose report."""
    table, name = {}, None
    for line in log.splitlines():
        if m := re.search(r"Function properties for (\S+)", line):
            name, spills = m.group(1), (0, 0)
        elif name and (m := re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)):
            spills = (int(m.group(1)), int(m.group(2)))
        elif name and (m := re.search(r"Used (\d+) registers", line)):
            table[name] = (int(m.group(1)), *spills)
            name = None
    return table


def sass_lines(listing: str) -> dict:
    """kernel -> lines of its SASS in `nvdisasm -c -sf` output."""
    counts, name = {}, None
    for line in listing.splitlines():
        if m := re.match(r"^\.text\.(\S+):$", line):
            name = m.group(1)
            counts[name] = 0
        elif line.lstrip().startswith(".section") or line.startswith("//-----"):
            name = None
        elif name:
            counts[name] += 1
    return counts


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        allow_abbrev=False, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--nvrtc", default=None, help="the NVRTC library (default: the one found here, as the tests do)")
    p.add_argument("--nvdisasm", default=None, help="nvdisasm, for the lines of SASS (default: not counted)")
    p.add_argument("--files", default=",".join(compiler.HOPPER_FILES), help="kernel files (default: %(default)s)")
    p.add_argument("--arch", default="sm_90", help="target of the files that are not Hopper's (default: sm_90)")
    p.add_argument("--kernels", default="", help="only the kernels whose name matches this regular expression")
    args = p.parse_args(argv)
    found = nvrtc_and_files(args.nvrtc, args.files)
    if found is None:
        return 2
    library, _, names = found
    if args.nvdisasm and not os.access(args.nvdisasm, os.X_OK):
        print(f"error: no nvdisasm program at {args.nvdisasm}; pass --nvdisasm PATH or leave it out", file=sys.stderr)
        return 2
    try:
        wanted = re.compile(args.kernels)
    except re.error as e:
        print(f"error: --kernels {args.kernels!r} is not a regular expression ({e})", file=sys.stderr)
        return 2
    for name in names:
        arch = compiler.HOPPER_ARCH if name in compiler.HOPPER_FILES else args.arch
        text = compiler.source(name)
        try:
            log = compiler.ptxas_report(text, name, arch, library=library)
            lines = {}
            if args.nvdisasm:
                with tempfile.TemporaryDirectory() as folder:  # (nvdisasm reads a file, not a pipe)
                    path = os.path.join(folder, "kernels.cubin")
                    with open(path, "wb") as f:
                        f.write(compiler.nvrtc_cubin(text, name, arch, library=library))
                    listing = subprocess.run([args.nvdisasm, "-c", "-sf", path], capture_output=True, check=True)
                lines = sass_lines(listing.stdout.decode())
        except compiler.NVRTCError as e:
            print(f"error: NVRTC could not build {name}: {e}", file=sys.stderr)
            return 1
        except subprocess.CalledProcessError as e:
            print(f"error: nvdisasm could not read {name}'s machine code: {e.stderr.decode().strip()}", file=sys.stderr)
            return 1
        print(f"{name} ({arch}): kernel, registers, spill stores / loads (bytes){', SASS lines' if lines else ''}")
        for kernel, (registers, stores, loads) in sorted(ptxas_table(log).items()):
            if wanted.search(kernel):
                print(f"  {kernel:48s} {registers:4d} {stores:5d} / {loads:<5d} {lines.get(kernel, '')}")
        for line in log.splitlines():
            if any(code in line for code in SERIALISED):
                print(f"  serialised: {line.strip()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
