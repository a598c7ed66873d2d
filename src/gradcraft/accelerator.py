"""`torch.accelerator`: the device-neutral questions (is there an accelerator, which, how many), answered
for gradcraft's one accelerator kind, CUDA.

    device = torch.accelerator.current_accelerator().type if torch.accelerator.is_available() else "cpu"
"""

from gradcraft import cuda


class AcceleratorDevice(str):
    """The accelerator's device: the string gradcraft's `.to()` takes ("cuda:0"), with torch.device's
    `.type` ("cuda") and `.index`."""

    @property
    def type(self) -> str:
        return self.partition(":")[0]

    @property
    def index(self):
        _, _, index = self.partition(":")
        return int(index) if index else None


_index = 0


def is_available() -> bool:
    return cuda.is_available()


def current_accelerator(check_available: bool = False):
    """The accelerator's device ("cuda"), None where there is none. (PyTorch names the compiled-in
    accelerator even without a device unless check_available; gradcraft knows of one only when usable.)"""
    return AcceleratorDevice("cuda") if is_available() else None


def device_count() -> int:
    return cuda.device_count()


def current_device_index() -> int:
    return _index if is_available() else -1


current_device_idx = current_device_index


def set_device_index(device, /) -> None:
    """Remember the accelerator index (gradcraft tensors name their device explicitly: "cuda:N")."""
    global _index
    from gradcraft.device import canonical

    _index = device if isinstance(device, int) else int(canonical(device).partition(":")[2] or 0)


set_device_idx = set_device_index


def synchronize(device=None, /) -> None:
    cuda.synchronize(device)
