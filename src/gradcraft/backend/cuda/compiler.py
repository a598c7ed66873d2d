"""Load the kernel sources in kernels/ and compile them with NVRTC, once per (file, device, options).

The machine code is kept on disk (`cached_cubin`: GRADCRAFT_KERNEL_CACHE, default
~/.cache/gradcraft/kernels), named by a hash of the whole source text, the target, the options and
NVRTC's version: a later process, or a later gradcraft whose kernel is unchanged, loads it without
compiling. The first time a process needs a kernel, every kernel file the cache lacks for the device
is compiled at once, in parallel threads, with one line saying so (`build_all`); `gradcraft prebuild`
fills the cache ahead of time (on the GPU machine, or for an architecture on a machine without one).

Sources are plain CUDA C++ with `extern "C"` kernels and no CUDA headers (kernels/common.cuh
converts bfloat16/float16 by hand), so they compile the same through CuPy on a GPU machine and
through a bare NVRTC library without one (`nvrtc_compile`, used by tests/test_cuda_compile.py).
Local `#include "x.cuh"` lines are expanded here, so the text handed to the compiler is the whole
program: CuPy's on-disk cache, keyed by that text, can never serve a kernel built from an older header.
"""

import ctypes
import functools
import glob
import hashlib
import importlib.util
import os
import re
import tempfile
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

KERNEL_DIR = Path(__file__).parent / "kernels"
OPTIONS = ("-std=c++17",)
_INCLUDE = re.compile(r'^#include "([^"]+)"\s*$', re.M)


def kernel_files() -> list[Path]:
    return sorted(KERNEL_DIR.glob("*.cu"))


def source(name: str) -> str:
    """The full text of kernels/<name> with its local includes expanded (each header once)."""
    return expand((KERNEL_DIR / name).read_text())


def expand(text: str) -> str:
    """text with its local includes (headers of kernels/) expanded, each header once: generated
    kernels (fused.py) include the same headers as the files."""
    seen: set[str] = set()

    def expand_text(text: str) -> str:
        def include(match):
            header = match.group(1)
            if header in seen:
                return ""
            seen.add(header)
            return expand_text((KERNEL_DIR / header).read_text())

        return _INCLUDE.sub(include, text.replace("#pragma once", ""))

    return expand_text(text)


@functools.cache
def module(name: str, device_id: int, options: tuple = OPTIONS):
    """kernels/<name> compiled for one device's architecture (sm_XY, as CuPy targets it) and loaded: the
    machine code from the kernel cache, filled for every kernel file at the first call (warm_cache).
    An architecture this NVRTC cannot build machine code for goes through cupy.RawModule (CuPy's choice)."""
    import cupy
    from cupy.cuda import nvrtc

    if options == OPTIONS:
        arch = device_arch(device_id)
        warm_cache(arch)
        text = source(name)
        try:
            cubin = cached_cubin(text, arch, nvrtc.getVersion(), lambda: cupy_cubin(text, name, arch))
        except NVRTCError:
            cubin = None
        if cubin is not None:
            # loaded as a RawModule (its kernels are RawKernels, as the compiled path's: launchers set
            # their shared-memory allowance and read .kernel.ptr), from the cache file
            path = _cache_dir() / cubin_name(text, arch, nvrtc.getVersion())
            if not path.is_file():  # a read-only cache: a file of this process's own
                handle, temporary = tempfile.mkstemp(suffix=".cubin")
                with os.fdopen(handle, "wb") as f:
                    f.write(cubin)
                path = Path(temporary)
            with cupy.cuda.Device(device_id):
                mod = cupy.RawModule(path=str(path))
                mod.compile()
            return mod
    with cupy.cuda.Device(device_id):
        mod = cupy.RawModule(code=source(name), options=options, backend="nvrtc")
        mod.compile()
    return mod


def device_arch(device_id: int) -> str:
    import cupy

    return f"sm_{cupy.cuda.Device(device_id).compute_capability}"


def cupy_cubin(text: str, name: str, arch: str) -> bytes:
    """Machine code of `text` for `arch` from CuPy's NVRTC (the one whose version keys the cache)."""
    from cupy.cuda import nvrtc

    prog = nvrtc.createProgram(text, name, [], [])
    try:
        try:
            nvrtc.compileProgram(prog, [f"--gpu-architecture={arch}", *OPTIONS])  # (CuPy releases the GIL here)
        except nvrtc.NVRTCError as e:
            raise NVRTCError(f"{name} ({arch}): {e}\n{nvrtc.getProgramLog(prog)}") from None
        return nvrtc.getCUBIN(prog)
    finally:
        nvrtc.destroyProgram(prog)


def targets(arch: str, names=None) -> list:
    """(kernel file, target) pairs a device of `arch` runs: every file for `arch`, and on an H100/H200
    (sm_90) the Hopper files for sm_90a instead (hopper_module)."""
    names = [p.name for p in kernel_files()] if names is None else list(names)
    found = [(n, arch) for n in names if n not in HOPPER_FILES]
    if arch == "sm_90":
        found += [(n, HOPPER_ARCH) for n in names if n in HOPPER_FILES]
    return found


def missing(pairs, version) -> list:
    """The (file, target) pairs whose machine code the kernel cache lacks for NVRTC `version`."""
    return [(n, a) for n, a in pairs if not (_cache_dir() / cubin_name(source(n), a, version)).is_file()]


def build_all(pairs, version, compile_one, log=None, workers: int | None = None) -> list:
    """Compile the pairs the cache lacks into it, in parallel threads (NVRTC's compile runs without the
    GIL: CuPy calls it `with nogil`, ctypes releases it around every foreign call), after one line on
    `log`. compile_one(text, name, arch) -> bytes. Returns the pairs built; one that fails is left out
    (and compiled again, with its error, when it is loaded)."""
    todo = missing(pairs, version)
    if not todo:
        return []
    if log is not None:
        log(f"compiling {len(todo)} CUDA kernels (first run only; kept in {_cache_dir()})")

    def one(pair):
        name, arch = pair
        text = source(name)
        try:
            store_cubin(_cache_dir() / cubin_name(text, arch, version), compile_one(text, name, arch))
        except (NVRTCError, OSError):
            return None
        return pair

    with ThreadPoolExecutor(max_workers=max(1, min(workers or os.cpu_count() or 1, len(todo)))) as pool:
        return [pair for pair in pool.map(one, todo) if pair is not None]


_warmed: set = set()
_warm_lock = threading.Lock()


def warm_cache(arch: str) -> None:
    """Once per process and architecture: build what the kernel cache lacks for this device, all at once."""
    from cupy.cuda import nvrtc

    with _warm_lock:
        if arch in _warmed:
            return
        _warmed.add(arch)
        build_all(targets(arch), nvrtc.getVersion(), cupy_cubin, log=lambda m: print(m, file=sys.stderr, flush=True))


@functools.cache
def function(name: str, kernel: str, device_id: int):
    """One kernel of kernels/<name>, e.g. function("softmax.cu", "softmax_fwd_f32", 0)."""
    return module(name, device_id).get_function(kernel)


# Kernels that use Hopper's architecture-specific instructions (wgmma: kernels/flash_hopper*.cu) need the
# sm_90a target, which CuPy's compile never picks (it names compute_90/sm_90 for an H100 or H200).
HOPPER_ARCH = "sm_90a"
HOPPER_FILES = ("flash_hopper.cu", "flash_hopper_bwd.cu")  # built by hopper_module for HOPPER_ARCH


def _cache_dir() -> Path:
    return Path(os.environ.get("GRADCRAFT_KERNEL_CACHE") or Path.home() / ".cache" / "gradcraft" / "kernels")


def cubin_name(text: str, arch: str, version) -> str:
    """The cache's file name for the machine code of `text` built for `arch` by NVRTC `version`
    ((major, minor), as cupy.cuda.nvrtc.getVersion gives it)."""
    return hashlib.sha256("\0".join((text, arch, *OPTIONS, repr(tuple(version)))).encode()).hexdigest() + ".cubin"


def cached_cubin(text: str, arch: str, version, build) -> bytes:
    """The machine code for `text`, from the on-disk cache (GRADCRAFT_KERNEL_CACHE, default
    ~/.cache/gradcraft/kernels) when an earlier process built it, else build() stored there. CuPy caches
    what it compiles itself; hopper_module compiles through NVRTC directly (CuPy cannot name sm_90a),
    and the Hopper files take NVRTC tens of seconds. The key is the whole source text, the target, the
    options and NVRTC's `version`, so an edited kernel or header is never served stale."""
    path = _cache_dir() / cubin_name(text, arch, version)
    try:
        return path.read_bytes()
    except OSError:
        pass
    cubin = build()
    try:
        store_cubin(path, cubin)
    except OSError:
        pass  # a read-only home: compile again next time
    return cubin


def store_cubin(path: Path, cubin: bytes) -> None:
    """Write a cache file whole under a temporary name, then rename it: a concurrent reader never
    sees half a file (OSError where the folder cannot be made or written)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(cubin)
    os.replace(tmp, path)


@functools.cache
def hopper_module(name: str, device_id: int):
    """kernels/<name> compiled by NVRTC to sm_90a machine code and loaded on one device (a
    cupy.cuda.function.Module). Only for a device of compute capability 9.0: sm_90a code runs on no other."""
    import cupy
    from cupy.cuda import function as cuda_function  # (this module's own `function` is the kernel cache)
    from cupy.cuda import nvrtc

    text = source(name)
    warm_cache(device_arch(device_id))
    cubin = cached_cubin(text, HOPPER_ARCH, nvrtc.getVersion(), lambda: cupy_cubin(text, name, HOPPER_ARCH))
    with cupy.cuda.Device(device_id):
        mod = cuda_function.Module()
        mod.load(cubin)
    return mod


@functools.cache
def hopper_function(name: str, kernel: str, device_id: int):
    return hopper_module(name, device_id).get_function(kernel)


# ---------------------------------------------------------------- NVRTC without a GPU


class NVRTCError(RuntimeError):
    pass


def find_nvrtc() -> str | None:
    """Path of a libnvrtc shared library: the nvidia-cuda-nvrtc-cu12 wheel's, or the system's."""
    candidates = []
    for package in ("nvidia.cuda_nvrtc", "nvidia.cu13", "nvidia"):
        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            spec = None
        for root in (spec.submodule_search_locations or []) if spec else []:
            candidates += sorted(glob.glob(os.path.join(root, "**", "libnvrtc.so*"), recursive=True))
    for directory in ("/usr/local/cuda/lib64", "/usr/lib/x86_64-linux-gnu"):
        candidates += sorted(glob.glob(os.path.join(directory, "libnvrtc.so*")))
    candidates = [c for c in candidates if "builtins" not in c and ".alt." not in c]
    return candidates[0] if candidates else None


@functools.cache
def _nvrtc(path: str):
    # NVRTC opens its builtins library by name at compile time; a wheel's copy lies beside it, off the
    # loader's path, so load it first (a library already loaded is what dlopen of its name returns).
    for builtins in sorted(glob.glob(os.path.join(os.path.dirname(path), "libnvrtc-builtins.so*"))):
        if ".alt." not in builtins:
            ctypes.CDLL(builtins, mode=ctypes.RTLD_GLOBAL)
    lib = ctypes.CDLL(path)
    lib.nvrtcGetErrorString.restype = ctypes.c_char_p
    return lib


def nvrtc_compile(text: str, name: str, arch: str, options: tuple = OPTIONS, library: str | None = None) -> bytes:
    """Compile CUDA C++ to PTX for `arch` (e.g. "sm_90") with NVRTC through ctypes; raises NVRTCError
    with the compiler's log on failure."""
    return _nvrtc_run(text, name, arch, options, library)[0]


def ptxas_report(text: str, name: str, arch: str, library: str | None = None) -> str:
    """NVRTC's log of compiling `text` for the real target `arch` with ptxas's verbose report: each
    kernel's registers and spills, and ptxas's notes, such as the wgmma serialisation warnings
    (C7512/C7513/C7514) that tests/test_cuda_compile.py keeps out of the Hopper kernels."""
    return _nvrtc_run(text, name, arch, (*OPTIONS, "--ptxas-options=-v"), library)[1]


def nvrtc_cubin(text: str, name: str, arch: str, library: str | None = None) -> bytes:
    """Compile CUDA C++ to machine code for the real target `arch` (e.g. "sm_90a") with NVRTC through
    ctypes, as hopper_module does on the GPU machine (same options): scripts/prebuild_kernels.py
    fills a kernel cache with it on a machine without a GPU."""
    return _nvrtc_run(text, name, arch, OPTIONS, library, cubin=True)[0]


def nvrtc_version(library: str | None = None) -> tuple[int, int]:
    """(major, minor) of an NVRTC library, the version that keys its machine code in the cache."""
    lib = _nvrtc(library or find_nvrtc())
    major, minor = ctypes.c_int(), ctypes.c_int()
    lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    return major.value, minor.value


def _nvrtc_run(
    text: str, name: str, arch: str, options: tuple, library: str | None, cubin: bool = False
) -> tuple[bytes, str]:
    path = library or find_nvrtc()
    if path is None:
        raise NVRTCError("no libnvrtc found; pip install nvidia-cuda-nvrtc-cu12")
    lib = _nvrtc(path)

    def check(status, what):
        if status != 0:
            raise NVRTCError(f"{what}: {lib.nvrtcGetErrorString(status).decode()}")

    prog = ctypes.c_void_p()
    check(lib.nvrtcCreateProgram(ctypes.byref(prog), text.encode(), name.encode(), 0, None, None), "create")
    try:
        opts = [f"--gpu-architecture={arch}".encode(), *(o.encode() for o in options)]
        status = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, log)
        if status != 0:
            raise NVRTCError(f"{name} ({arch}): {lib.nvrtcGetErrorString(status).decode()}\n{log.value.decode()}")
        kind = "CUBIN" if cubin else "PTX"
        size = ctypes.c_size_t()
        check(getattr(lib, f"nvrtcGet{kind}Size")(prog, ctypes.byref(size)), f"{kind} size")
        code = ctypes.create_string_buffer(size.value)
        check(getattr(lib, f"nvrtcGet{kind}")(prog, code), kind)
        return code.raw, log.value.decode()
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
