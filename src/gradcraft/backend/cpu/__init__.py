"""The CPU backend: every kernel of the contract, written with NumPy, one module per kernel family
(named as cuda/kernels/<family>.cu), with compiled C versions of the row-wise ones (native/).

The NumPy kernels are also the reference implementations: each C and CUDA kernel is tested against
the NumPy function of the same contract name (`CPUBackend().reference_kernels`).

The elementwise and row-wise kernels can run on several threads when their arrays are big
(threads.py: the process's cores unless GRADCRAFT_NUM_THREADS says otherwise); matmuls use BLAS's own threads,
limited per product by blas.py.
"""

import ctypes
import os
import sys

import numpy as np

from gradcraft.backend import Backend, assemble_kernels
from gradcraft.device import count_transfer
from gradcraft.backend.cpu import (
    activations,
    blas,
    creation,
    cross_entropy,
    dropout,
    elementwise,
    embedding,
    flash_attention,
    gather,
    gemv,
    kv_cache,
    linalg,
    linear,
    linear_cross_entropy,
    matmul,
    moe,
    movement,
    native,
    norms,
    optim,
    random,
    reduce,
    rope,
    sampling,
    sdpa,
    softmax,
)
from gradcraft.backend.cpu.common import _out, _pool, stats
from gradcraft.backend.cpu.native import fused as native_fused
from gradcraft.backend.cpu.threads import num_threads, set_num_threads  # noqa: F401  (public here)

# The kernel families; the backend's table is their KERNELS dicts put together.
FAMILIES = (
    elementwise,
    activations,
    reduce,
    matmul,
    movement,
    gather,
    creation,
    random,
    softmax,
    cross_entropy,
    norms,
    embedding,
    dropout,
    rope,
    sdpa,
    flash_attention,
    kv_cache,
    moe,
    sampling,
    gemv,
    linear,
    linear_cross_entropy,
    linalg,
)


class CPUBackend(Backend):
    device = "cpu"

    def kernel_status(self) -> str:
        """Whether the C kernels (native/) are compiled, and for which target."""
        from gradcraft.backend.cpu import native

        return native.status()

    def __init__(self):
        self.pool = _pool
        self.kernels = assemble_kernels(FAMILIES)
        self.check_contract()
        # The compiled C kernels where this machine has a C compiler (native/); the NumPy kernels
        # stay their fallback, and the reference that the C and CUDA kernels are tested against.
        self.reference_kernels = dict(self.kernels)
        self.kernels.update(native.kernels(self.reference_kernels, _out))
        self.kernels.update(blas.thread_policy(self.kernels))  # small products on one BLAS thread

    def recomputing_attention_preferred(self, dtype) -> bool:
        # The C kernels (native/sdpa.c) skip the masked half of causal attention and keep each
        # head's weights in cache: faster than explicit attention's six BLAS products and softmax.
        return self._native("sdpa") and np.dtype(dtype) == np.float32

    def fused_linear_cross_entropy(self, dtype) -> bool:
        # The C kernel's chunks keep the logits in cache (native/linear_cross_entropy.py).
        return self._native("linear_cross_entropy") and np.dtype(dtype) == np.float32

    def _native(self, name: str) -> bool:
        """Whether the table's kernel is a C one: not the NumPy reference, nor the reference inside the
        BLAS thread policy's wrapper (blas.thread_policy wraps the attention kernels either way)."""
        kernel = self.kernels.get(name)
        return kernel is not None and getattr(kernel, "__wrapped__", kernel) is not self.reference_kernels.get(name)

    @property
    def fuses_elementwise(self) -> bool:
        # Fused groups (engine/fusion.py) run as generated C kernels (native/fused.py) where a compiler
        # exists; without one a group would only be its kernels one by one: fusion stays off.
        return native_fused.available()

    fused_extra_dtypes = frozenset({np.dtype(np.float64)})  # (the C kernels compute in double too)

    @property
    def fused_min_elements(self) -> int:
        return native_fused.MIN_ELEMENTS  # (smaller groups would run by reference: not worth grouping)

    def fused_elementwise(self, args: list, program: tuple, shape: tuple, dtype):
        def reference():
            return Backend.fused_elementwise(self, args, program, shape, dtype)

        return native_fused.run(args, program, shape, dtype, _out, reference)

    def from_numpy(self, array):
        count_transfer()
        return stats.track(np.array(array, copy=True, order="C"))

    def adamw_step(self, *args, **kwargs) -> None:
        optim._adamw_step(*args, **kwargs)

    def grad_norm(self, grads, max_norm: float = 0.0):
        return optim._grad_norm(grads, max_norm)

    def scale_many(self, arrays, scale) -> None:
        optim._scale_many(arrays, scale)

    def write(self, array, values) -> None:
        count_transfer()
        array[...] = values

    def to_numpy(self, array):
        count_transfer()
        return array

    def release(self, array) -> None:
        # Recycle only when nothing else holds the array or its base (a view made from it, a tensor):
        # the engine passed its last reference, so the counts are this argument plus getrefcount's own
        # (and, for the base, the array's .base link). Measured on CPython 3.11-3.13.
        if array.base is not None and sys.getrefcount(array) <= 2 and sys.getrefcount(array.base) <= 2:
            self.pool.recycle(array)


def _keep_freed_memory_mapped() -> None:
    """Ask glibc to serve big arrays from its heap and keep freed memory, instead of mmap-ing fresh
    pages for every array over 128 KiB and unmapping them on free: NumPy temporaries then skip the
    page faults, which made elementwise kernels on large arrays 2-3x slower. The cost is that freed
    memory stays with the process (as a caching allocator's does). GRADCRAFT_MALLOC_TUNING=0 opts out."""
    if os.environ.get("GRADCRAFT_MALLOC_TUNING", "1") == "0" or not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6")
        M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
        libc.mallopt(M_MMAP_THRESHOLD, 1 << 30)
        libc.mallopt(M_TRIM_THRESHOLD, 1 << 30)
    except (OSError, AttributeError):  # not glibc: nothing to tune
        pass


def create_backend(index: int = 0) -> CPUBackend:
    _keep_freed_memory_mapped()
    return CPUBackend()
