"""torch.cpu: the CPU device's everyday questions, and torch.cpu.amp (the deprecated CPU names of
torch.amp: autocast with bfloat16 by default; GradScaler for the "cpu" device)."""

import sys
import types
import warnings

from gradcraft.amp.autocast_mode import cpu_autocast
from gradcraft.amp.grad_scaler import GradScaler as _GradScaler


def is_available() -> bool:
    return True


def device_count() -> int:
    return 1


def synchronize(device=None) -> None:
    """The CPU backend computes when asked: nothing is queued to wait for."""


class _CpuGradScaler(_GradScaler):
    """torch.cpu.amp.GradScaler: GradScaler("cpu", ...)."""

    def __init__(self, init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000, enabled=True):
        warnings.warn(
            "`torch.cpu.amp.GradScaler(args...)` is deprecated. Please use `torch.amp.GradScaler('cpu', args...)` "
            "instead.",
            FutureWarning,
            stacklevel=2,
        )
        super().__init__("cpu", init_scale, growth_factor, backoff_factor, growth_interval, enabled)


amp = types.ModuleType(__name__ + ".amp", "torch.cpu.amp: autocast (bfloat16) and GradScaler for the CPU.")
amp.autocast, amp.GradScaler = cpu_autocast, _CpuGradScaler
sys.modules[__name__ + ".amp"] = amp
