"""Kernel launches with the arguments packed into one buffer: the eager attention call's launch path.

CuPy's kernel call turns each argument into a C value one by one (a NumPy scalar, an array's
pointer), some 0.2 us each: about 11 us for the flash kernels' 30-odd arguments, four times per
eager attention call (bench/attention_host.py, BENCHMARK.md). Here the launcher names the arguments'
C types once, as a `struct` format ("P" a device pointer, "q" int64, "i" int32, "I" uint32, "f"
float32), `struct` writes the values into a per-thread buffer in one call, and the driver's
cuLaunchKernel takes that buffer whole (its `extra` argument, CU_LAUNCH_PARAM_BUFFER_POINTER),
through CuPy's binding of it, on CuPy's current stream (so stream capture records it as it records
CuPy's own launches). struct's native mode ("@") aligns each value to its size, as the compiler lays
out a kernel's parameters for these types; the driver copies the buffer when the call returns, so it
is reused at once. CuPy is imported only at the first launch: the layouts are testable without it.
"""

import ctypes
import functools
import struct
import threading

# cuda.h: the markers of cuLaunchKernel's `extra` array
_BUFFER_POINTER, _BUFFER_SIZE, _END = 1, 2, 0
BUFFER_BYTES = 4096  # the driver's limit on a kernel's parameters (4 KB before CUDA 12.1)
_C_TYPES = "PqiIf"  # a device pointer, int64, int32, uint32, float32 (8, 8, 4, 4, 4 bytes, aligned to their size)


@functools.cache
def layout(types: str) -> struct.Struct:
    """The Struct that packs arguments of these C types (one format character each) as a kernel
    receives them."""
    unknown = set(types) - set(_C_TYPES)
    if unknown:
        raise ValueError(f"packed launch: no kernel argument type {''.join(sorted(unknown))!r} (known: P q i I f)")
    packed = struct.Struct("@" + types)
    if packed.size > BUFFER_BYTES:
        raise ValueError(f"packed launch: {packed.size} bytes of arguments, more than a kernel takes ({BUFFER_BYTES})")
    return packed


class _Scratch(threading.local):
    """Each thread's argument buffer and the `extra` array that points the driver at it."""

    def __init__(self):
        self.buffer = ctypes.create_string_buffer(BUFFER_BYTES)
        self.bytes = memoryview(self.buffer).cast("B")
        self.size = ctypes.c_size_t(0)
        self.extra = (ctypes.c_void_p * 5)(
            _BUFFER_POINTER, ctypes.addressof(self.buffer), _BUFFER_SIZE, ctypes.addressof(self.size), _END
        )
        self.extra_address = ctypes.addressof(self.extra)


_scratch = _Scratch()
_cupy = None  # (cupy.cuda.driver, cupy.cuda.get_current_stream), imported at the first launch


def _cuda():
    global _cupy
    if _cupy is None:
        import cupy as cp

        _cupy = (cp.cuda.driver, cp.cuda.get_current_stream)
    return _cupy


def launch(function: int, grid: tuple, threads: int, shared: int, types: str, values: tuple) -> None:
    """Launch the CUfunction `function` (a handle: cupy's Function.ptr) on `grid` (1 to 3 block
    counts) of `threads` threads with `shared` bytes of dynamic shared memory, its arguments
    `values` of C types `types` (see layout; an array is passed as its `.data.ptr`)."""
    packed = layout(types)
    packed.pack_into(_scratch.bytes, 0, *values)
    _issue(function, _grid3(grid), threads, shared, packed.size)


def _grid3(grid: tuple) -> tuple:
    return grid if len(grid) == 3 else (*grid, 1, 1)[:3]


def _issue(function: int, grid: tuple, threads: int, shared: int, size: int) -> None:
    """Launch `function` with the first `size` bytes of this thread's buffer as its arguments."""
    driver, current_stream = _cupy or _cuda()
    scratch = _scratch
    scratch.size.value = size
    gx, gy, gz = grid
    driver.launchKernel(function, gx, gy, gz, threads, 1, 1, shared, current_stream().ptr, 0, scratch.extra_address)


class Launch:
    """One kernel launch prepared once: every argument fixed but the leading device pointers (the "P"s
    at the start of `types`), which each call passes, packed over a copy of the rest. A launcher keeps
    these by shape and layout, so an eager call pays for its pointers and the launch only."""

    __slots__ = ("function", "grid", "threads", "shared", "size", "template", "head")

    def __init__(self, function: int, grid: tuple, threads: int, shared: int, types: str, fixed: tuple):
        packed = layout(types)
        pointers = len(types) - len(types.lstrip("P"))
        if len(fixed) != len(types) - pointers:
            raise ValueError(
                f"packed launch: {len(fixed)} fixed arguments for the {len(types) - pointers} of {types!r}"
            )
        template = bytearray(packed.size)
        packed.pack_into(template, 0, *([0] * pointers), *fixed)
        self.function, self.threads, self.shared = function, threads, shared
        self.grid = _grid3(grid)
        self.size, self.template, self.head = packed.size, bytes(template), layout("P" * pointers)

    def __call__(self, *pointers) -> None:
        buffer = _scratch.bytes
        buffer[: self.size] = self.template
        self.head.pack_into(buffer, 0, *pointers)
        _issue(self.function, self.grid, self.threads, self.shared, self.size)
