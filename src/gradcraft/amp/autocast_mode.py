"""torch.autocast: a context manager (and decorator) that turns autocast on for one device type.

    with gradcraft.autocast("cuda", dtype=gradcraft.bfloat16):
        logits, loss = model(x, y)      # matmuls in bfloat16, the loss in float32
    loss.backward()                     # gradients reach the float32 parameters in float32

The state is per thread and nests: each block saves the device type's settings on entry and puts
them back on exit. What each op does under it: gradcraft/amp/policy.py.
"""

from __future__ import annotations

import functools
import warnings

from gradcraft import dtypes
from gradcraft.amp import policy
from gradcraft.amp.policy import state
from gradcraft.typing import DTypeLike


def is_autocast_available(device_type: str) -> bool:
    return device_type in policy.DEVICE_TYPES


def is_autocast_enabled(device_type: str | None = None) -> bool:
    """torch.is_autocast_enabled(): CUDA's setting without an argument, as PyTorch's."""
    return state.enabled[policy.device_type(device_type or "cuda")]


def set_autocast_enabled(device_type: str, enabled: bool) -> None:
    state.enabled[policy.device_type(device_type)] = bool(enabled)
    state.refresh()


def get_autocast_dtype(device_type: str) -> dtypes.DType:
    return state.dtype[policy.device_type(device_type)]


def set_autocast_dtype(device_type: str, dtype: DTypeLike) -> None:
    state.dtype[policy.device_type(device_type)] = dtypes.to_dtype(dtype)


def is_autocast_cpu_enabled() -> bool:
    return is_autocast_enabled("cpu")


def get_autocast_gpu_dtype() -> dtypes.DType:
    return get_autocast_dtype("cuda")


def get_autocast_cpu_dtype() -> dtypes.DType:
    return get_autocast_dtype("cpu")


def is_autocast_cache_enabled() -> bool:
    return state.cache_enabled


def set_autocast_cache_enabled(enabled: bool) -> None:
    # Accepted for PyTorch's API: a cast here is a lazy node of the step's graph, so there is no
    # cache of cast weights to keep (a weight read twice is cast twice; both casts are cheap nodes).
    state.cache_enabled = bool(enabled)


def clear_autocast_cache() -> None:
    """Nothing to clear: see set_autocast_cache_enabled."""


def autocast_increment_nesting() -> int:
    state.nesting += 1
    return state.nesting


def autocast_decrement_nesting() -> int:
    state.nesting -= 1
    return state.nesting


class autocast:
    """torch.autocast(device_type, dtype=None, enabled=True, cache_enabled=None).

    dtype defaults to the device type's current autocast dtype: bfloat16 on the CPU, float16 on
    CUDA (as PyTorch). A dtype other than bfloat16/float16 warns and disables the block; on a
    machine without CUDA, autocast("cuda") warns and disables it, as PyTorch does."""

    def __init__(self, device_type: str, dtype=None, enabled: bool = True, cache_enabled: bool | None = None):
        if not isinstance(device_type, str):
            raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")
        if device_type not in policy.DEVICE_TYPES:
            raise RuntimeError(f"User specified an unsupported autocast device_type '{device_type}'")
        self.device = device_type
        self.fast_dtype = get_autocast_dtype(device_type) if dtype is None else dtypes.to_dtype(dtype)
        self._cache_enabled = state.cache_enabled if cache_enabled is None else bool(cache_enabled)
        if enabled:
            if device_type == "cuda":
                from gradcraft import cuda

                if not cuda.is_available():
                    warnings.warn("CUDA is not available or torch_xla is imported. Disabling autocast.", stacklevel=2)
                    enabled = False
                elif self.fast_dtype == dtypes.bfloat16 and not cuda.is_bf16_supported():
                    raise RuntimeError("Current CUDA Device does not support bfloat16. Please switch dtype to float16.")
            elif self.fast_dtype not in policy.SUPPORTED_DTYPES:
                name = device_type.upper()
                warnings.warn(
                    f"In {name} autocast, but the target dtype is not supported. Disabling autocast.\n"
                    f"{name} Autocast only supports dtypes of gradcraft.bfloat16, gradcraft.float16 currently.",
                    stacklevel=2,
                )
                enabled = False
        self._enabled = bool(enabled)

    def __enter__(self):
        self.prev_cache_enabled = state.cache_enabled
        self.prev = state.enabled[self.device]
        self.prev_fastdtype = state.dtype[self.device]
        state.enabled[self.device] = self._enabled
        state.dtype[self.device] = self.fast_dtype
        state.nesting += 1
        state.cache_enabled = self._cache_enabled
        state.refresh()
        return self

    def __exit__(self, exc_type, exc_val, exc_tb):
        state.nesting -= 1
        state.enabled[self.device] = self.prev
        state.dtype[self.device] = self.prev_fastdtype
        state.cache_enabled = self.prev_cache_enabled
        state.refresh()
        return False

    def __call__(self, func):
        @functools.wraps(func)
        def decorate_autocast(*args, **kwargs):
            with self:
                return func(*args, **kwargs)

        return decorate_autocast


def _deprecated(device_type: str) -> None:
    warnings.warn(
        f"`torch.{device_type}.amp.autocast(args...)` is deprecated. "
        f"Please use `torch.amp.autocast('{device_type}', args...)` instead.",
        FutureWarning,
        stacklevel=3,
    )


class cuda_autocast(autocast):
    """torch.cuda.amp.autocast(enabled=True, dtype=float16, cache_enabled=True): deprecated alias."""

    def __init__(self, enabled: bool = True, dtype=dtypes.float16, cache_enabled: bool = True):
        _deprecated("cuda")
        super().__init__("cuda", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


class cpu_autocast(autocast):
    """torch.cpu.amp.autocast(enabled=True, dtype=bfloat16, cache_enabled=True): deprecated alias."""

    def __init__(self, enabled: bool = True, dtype=dtypes.bfloat16, cache_enabled: bool = True):
        _deprecated("cpu")
        super().__init__("cpu", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)
