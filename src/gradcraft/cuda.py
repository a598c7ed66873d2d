"""torch.cuda's everyday questions, for code that picks its device: `gc.cuda.is_available()`."""

import sys as _sys

from gradcraft.device import canonical, get_backend
from gradcraft.device import is_available as _is_available


def is_available() -> bool:
    return _is_available("cuda")


def device_count() -> int:
    """How many CUDA devices this machine has (0 without a GPU or without CuPy)."""
    if not is_available():
        return 0
    import cupy

    return int(cupy.cuda.runtime.getDeviceCount())


def manual_seed(seed: int) -> None:
    """Seeds every device: the same as gradcraft.manual_seed (one generator serves all devices)."""
    from gradcraft.ops.creation import manual_seed as seed_all

    seed_all(seed)


manual_seed_all = manual_seed


def synchronize(device=None) -> None:
    """Wait for the device's queued kernels to finish."""
    if is_available():
        get_backend(canonical(device or "cuda")).synchronize()


def prebuild(device=None, arch: str | None = None, nvrtc: str | None = None, files=None, workers=None, log=print):
    """Fill the kernel cache (GRADCRAFT_KERNEL_CACHE, default ~/.cache/gradcraft/kernels) with the
    machine code of every CUDA kernel file, so that a later process compiles nothing (`gradcraft
    prebuild`). For `device`'s GPU through CuPy's NVRTC; or, on a machine without a GPU, for `arch`
    (e.g. "sm_90") through the NVRTC library `nvrtc` (found if None: the nvidia-cuda-nvrtc wheel's),
    which must be the version the GPU machine's CuPy loads. Returns (kernels built, kernels in all)."""
    from gradcraft.backend.cuda import compiler

    names = None if files is None else list(files)
    unknown = [n for n in names or () if not (compiler.KERNEL_DIR / n).is_file()]
    if unknown:
        from gradcraft.errors import UserError

        raise UserError(f"no kernel file {', '.join(unknown)} in {compiler.KERNEL_DIR}")
    if arch is None:
        from cupy.cuda import nvrtc as cupy_nvrtc

        arch = compiler.device_arch(int(canonical(device or "cuda").partition(":")[2] or 0))
        version, compile_one = cupy_nvrtc.getVersion(), compiler.cupy_cubin
    else:
        library = nvrtc or compiler.find_nvrtc()
        if library is None:
            from gradcraft.errors import UserError

            raise UserError("no NVRTC library found: pip install nvidia-cuda-nvrtc-cu12, or pass its path")
        try:
            version = compiler.nvrtc_version(library)
        except (OSError, AttributeError) as e:  # not a loadable library, or not NVRTC
            from gradcraft.errors import UserError

            raise UserError(f"{library} is not an NVRTC library ({e}); give the path of libnvrtc.so.N") from None

        def compile_one(text, name, target):
            return compiler.nvrtc_cubin(text, name, target, library=library)

    pairs = compiler.targets(arch, names)
    built = compiler.build_all(pairs, version, compile_one, log=log, workers=workers)
    failed = [f"{n} ({a})" for n, a in compiler.missing(pairs, version)]
    if failed:
        from gradcraft.errors import UserError

        raise UserError(f"NVRTC {version[0]}.{version[1]} could not build {', '.join(failed)} for {arch}")
    return len(built), len(pairs)


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """torch.cuda.is_bf16_supported(): a CUDA device whose compute capability is 8.0 or more (Ampere
    on) computes in bfloat16 natively; older ones emulate it (True only with including_emulation)."""
    if not is_available():
        return False
    import cupy

    major = int(cupy.cuda.Device().compute_capability) // 10
    return major >= 8 or including_emulation


# torch.cuda.amp (deprecated names of torch.amp): gradcraft.cuda.amp.autocast / .GradScaler
from gradcraft.amp import cuda as amp  # noqa: E402

_sys.modules[__name__ + ".amp"] = amp
