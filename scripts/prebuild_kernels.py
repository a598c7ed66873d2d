"""Build the Hopper kernels' machine code into a kernel cache, on a machine without a GPU.

    python scripts/prebuild_kernels.py --nvrtc /path/to/libnvrtc.so.13 --out kcache
    # then, on the GPU machine: GRADCRAFT_KERNEL_CACHE=$PWD/kcache python ...

On an H100/H200, the first process to run flash attention compiles kernels/flash_hopper*.cu for sm_90a
with NVRTC (a minute or more on a fresh machine) and keeps the machine code in its kernel cache
(docs/cuda.md). This builds the same files here with an NVRTC library of the GPU machine's version
(its CuPy's `cupy.cuda.nvrtc.getVersion()`; e.g. `pip install --target DIR nvidia-cuda-nvrtc==13.0.88`
for 13.0) and names each file as that cache does, so the GPU machine reads them instead of compiling:
for machines that start fresh each time, or many nodes that would each compile the same kernels. A
cubin named for another version or another source text is never read (the name is a hash of both).
`gradcraft prebuild --arch sm_90 --nvrtc LIB --out kcache` builds every kernel file the same way (in
parallel), and `gradcraft prebuild --device cuda` does it on the GPU machine itself.
"""

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))

from gradcraft.backend.cuda import compiler  # noqa: E402


def nvrtc_and_files(nvrtc, files: str):
    """(library, its (major, minor) version, the kernel file names) from --nvrtc and --files, or None
    after one line on stderr saying what is wrong (scripts/kernel_report.py takes the same two)."""
    library = nvrtc or compiler.find_nvrtc()
    if library is None or not os.path.exists(library):
        print(f"error: no NVRTC library at {library or '(none found)'}; pass --nvrtc PATH", file=sys.stderr)
        return None
    names = [name for name in files.split(",") if name]
    unknown = [name for name in names if not (compiler.KERNEL_DIR / name).is_file()]
    if unknown:
        print(f"error: no kernel file {', '.join(unknown)} in {compiler.KERNEL_DIR}", file=sys.stderr)
        return None
    try:
        version = compiler.nvrtc_version(library)
    except (OSError, AttributeError) as e:  # not a loadable library, or not NVRTC
        print(f"error: {library} is not an NVRTC library ({e}); pass --nvrtc PATH/libnvrtc.so.N", file=sys.stderr)
        return None
    return library, version, names


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        allow_abbrev=False, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--nvrtc", default=None, help="the NVRTC library (default: the one found here, as the tests do)")
    p.add_argument("--out", required=True, help="the kernel cache folder to fill (GRADCRAFT_KERNEL_CACHE there)")
    p.add_argument("--files", default=",".join(compiler.HOPPER_FILES), help="kernel files (default: %(default)s)")
    args = p.parse_args(argv)
    found = nvrtc_and_files(args.nvrtc, args.files)
    if found is None:
        return 2
    library, version, names = found
    for name in names:
        start = time.perf_counter()
        text = compiler.source(name)
        try:
            cubin = compiler.nvrtc_cubin(text, name, compiler.HOPPER_ARCH, library=library)
        except compiler.NVRTCError as e:
            print(f"error: NVRTC {version[0]}.{version[1]} could not build {name}: {e}", file=sys.stderr)
            return 1
        path = Path(args.out) / compiler.cubin_name(text, compiler.HOPPER_ARCH, version)
        try:
            compiler.store_cubin(path, cubin)
        except OSError as e:
            print(f"error: cannot write {path} ({e.strerror}); choose another --out", file=sys.stderr)
            return 2
        print(f"{name}: {compiler.HOPPER_ARCH}, NVRTC {version[0]}.{version[1]}, {len(cubin)} bytes in "
              f"{time.perf_counter() - start:.1f} s -> {path}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
