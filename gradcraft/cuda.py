"""torch.cuda's everyday questions, for code that picks its device: `gc.cuda.is_available()`."""

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
