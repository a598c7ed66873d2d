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
