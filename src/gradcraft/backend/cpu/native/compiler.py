"""Compile the C kernels (kernels.c, sdpa.c) with the machine's C compiler, once, into one library,
and load it with ctypes.

The shared library is cached under GRADCRAFT_CACHE_DIR (default ~/.cache/gradcraft), in a file
named by a hash of the source, the compiler's version and the flags, so a changed source or
compiler builds a new one. `-march=native` is right here because the library is built on the
machine that runs it. With no compiler (or GRADCRAFT_CPU_NATIVE=0) `library()` is None and the
CPU backend keeps its NumPy kernels: slower, same results.
"""

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

SOURCE = Path(__file__).parent / "kernels.c"  # the row-wise and elementwise kernels
SOURCES = (SOURCE, SOURCE.parent / "sdpa.c")
HEADERS = (SOURCE.parent / "vector_math.h",)
# -fno-trapping-math lets gcc turn the kernels' range checks into selects on AVX2 (without it their
# loops vectorize only with AVX-512's masks; see exp_f in kernels.c). GRADCRAFT_CPU_MARCH replaces
# "native" (e.g. x86-64-v3 to measure AVX2 code on an AVX-512 machine).
_COMMON = ("-O3", "-fopenmp-simd", "-fno-math-errno", "-fno-trapping-math", "-fPIC", "-shared")
FLAGS = (f"-march={os.environ.get('GRADCRAFT_CPU_MARCH') or 'native'}", *_COMMON)
_BASIC_FLAGS = _COMMON  # where -march=native fails

_P, _I, _F = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float
SIGNATURES = {  # argument types of every kernel in kernels.c (all return void)
    "silu_f32": (_P, _P, _I, _I),
    "silu_backward_f32": (_P, _P, _P, _I, _I),
    "gelu_f32": (_P, _P, ctypes.c_int, _I, _I),
    "gelu_backward_f32": (_P, _P, _P, ctypes.c_int, _I, _I),
    "softmax_f32": (_P, _P, _I, _I, _I),
    "softmax_backward_f32": (_P, _P, _P, _I, _F, _I, _I),
    "log_softmax_f32": (_P, _P, _I, _I, _I),
    "log_softmax_backward_f32": (_P, _P, _P, _I, _I, _I),
    "swiglu_f32": (_P, _P, _I, _I, _I),
    "swiglu_backward_f32": (_P, _P, _P, _I, _I, _I),
    "rms_norm_f32": (_P, _P, _P, _I, _F, _I, _I),
    "rms_norm_backward_f32": (_P, _P, _P, _P, _P, _I, _I, _F, _I, _I),
    "layer_norm_f32": (_P, _P, _P, _P, _I, _F, _I, _I),
    "layer_norm_backward_f32": (_P, _P, _P, _P, _P, _P, _I, _I, _F, _I, _I),
    "cross_entropy_f32": (_P, _P, _P, _I, _I, _I, _F, _I, _I),
    "cross_entropy_backward_f32": (_P, _P, _P, _P, _I, _I, _I, _F, _I, _I),
    "cross_entropy_with_grad_f32": (_P, _P, _P, _I, _I, _I, _F, _I, _I),
    "masked_softmax_f32": (_P, _P, _I, _I, _F, ctypes.c_int, _I, _I, _I),
    "rope_f32": (_P, _P, _P, _P, _P, _I, _I, _I, ctypes.c_int, _I, _I),
    "adamw_f32": (_P, _P, _P, _P, _I, _F, _F, _F, _F, ctypes.c_double, ctypes.c_double, _F),
    "sdpa_scratch_floats": (_I, _I, _I, _I),
    "sdpa_f32": (_P, _P, _P, _P, _P, _I, _I, _I, _I, _I, _I, _F, ctypes.c_int, _I, _P, _I, _I),
    "sdpa_backward_f32": (_P, _P, _P, _P, _P, _P, _P, _P, _I, _I, _I, _I, _I, _I, _F, ctypes.c_int, _I, _P, _I, _I),
}
RESULT_TYPES = {"sdpa_scratch_floats": _I}  # the others return void

_status = "not loaded yet"


def cache_dir() -> Path:
    return Path(os.environ.get("GRADCRAFT_CACHE_DIR") or Path.home() / ".cache" / "gradcraft") / "cpu"


def find_compiler() -> str | None:
    """$CC, else cc, gcc or clang on the PATH."""
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


@functools.cache
def _version(compiler: str) -> str:
    try:
        return subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


@functools.cache
def _cpu_identity() -> str:
    """What -march=native compiles for: the processor's model and instruction-set flags (a cache shared
    by machines of different processors must not hand one's library to the other: illegal instructions)."""
    try:
        with open("/proc/cpuinfo") as f:
            lines = [line for line in f if line.startswith(("model name", "flags", "Features", "CPU part"))]
        return "".join(sorted(set(lines)))
    except OSError:
        return platform.processor() or platform.machine()


def build(compiler: str, flags=FLAGS) -> Path:
    """Path of the compiled library, compiling it when the cache lacks it. Raises RuntimeError with
    the compiler's message on failure."""
    key = hashlib.sha256(
        b"\0".join(
            [
                *(path.read_bytes() for path in SOURCES + HEADERS),
                _version(compiler).encode(),
                " ".join(flags).encode(),
                platform.machine().encode(),
                _cpu_identity().encode(),
            ]
        )
    ).hexdigest()[:16]
    target = cache_dir() / f"kernels-{key}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # Compile into a temporary name and rename: processes that build at the same time never load
    # a half-written library.
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    try:
        result = subprocess.run(
            [compiler, *flags, *map(str, SOURCES), "-o", tmp, "-lm"], capture_output=True, text=True, timeout=300
        )
        if result.returncode != 0:
            raise RuntimeError(
                result.stderr.strip().splitlines()[-1]
                if result.stderr.strip()
                else f"{compiler} exited with {result.returncode}"
            )
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def build_source(text: str, stem: str, compiler: str, flags, include_dir: Path = SOURCE.parent) -> Path:
    """Path of a library compiled from the C source `text` (a generated kernel: native/fused.py), cached
    like the kernels' library under a hash of the text, the headers, the compiler and the flags.
    Raises RuntimeError with the compiler's message on failure."""
    key = hashlib.sha256(
        b"\0".join(
            [
                text.encode(),
                *(path.read_bytes() for path in sorted(include_dir.glob("*.h"))),
                _version(compiler).encode(),
                " ".join(flags).encode(),
                platform.machine().encode(),
                _cpu_identity().encode(),
            ]
        )
    ).hexdigest()[:20]
    target = cache_dir() / f"{stem}-{key}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)  # (renamed when whole, as in build)
    os.close(fd)
    src = tmp[:-3] + ".c"
    try:
        Path(src).write_text(text)
        result = subprocess.run(
            [compiler, *flags, f"-I{include_dir}", src, "-o", tmp, "-lm"], capture_output=True, text=True, timeout=300
        )
        if result.returncode != 0:
            raise RuntimeError(result.stderr.strip() or f"{compiler} exited with {result.returncode}")
        os.replace(tmp, target)
    finally:
        for path in (tmp, src):
            if os.path.exists(path):
                os.unlink(path)
    return target


def _load(compiler: str, flags):
    """(path, loaded library) built with these flags; a cached file that does not load (damaged by a
    crash or a full disk) is built again."""
    path = build(compiler, flags)
    try:
        return path, ctypes.CDLL(str(path))
    except OSError:
        path.unlink(missing_ok=True)
        path = build(compiler, flags)
        return path, ctypes.CDLL(str(path))


@functools.cache
def library():
    """The loaded kernels (a ctypes.CDLL with its signatures set), or None when they cannot be had;
    `status()` says which and why."""
    global _status
    if os.environ.get("GRADCRAFT_CPU_NATIVE", "1") == "0":
        _status = "off (GRADCRAFT_CPU_NATIVE=0): NumPy kernels"
        return None
    compiler = find_compiler()
    if compiler is None:
        _status = "no C compiler found (set CC): NumPy kernels"
        return None
    try:
        try:
            path, lib = _load(compiler, FLAGS)
        except (RuntimeError, OSError):
            path, lib = _load(compiler, _BASIC_FLAGS)  # e.g. a compiler that has no -march=native
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        _status = f"compiling the C kernels failed ({e}): NumPy kernels"
        return None
    for name, argtypes in SIGNATURES.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = argtypes, RESULT_TYPES.get(name)
    _status = f"compiled C kernels ({path})"
    return lib


def status() -> str:
    """One line: whether the compiled kernels are in use, and if not, why."""
    library()
    return _status
