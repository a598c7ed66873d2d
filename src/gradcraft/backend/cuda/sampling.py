"""Each row's next token on the device (F.sample_tokens): the launcher of kernels/sampling.cu, one
block of THREADS threads per row. The NumPy reference is backend/cpu/sampling.py."""

import cupy as cp
import numpy as np

from gradcraft.backend.cuda import launch as L

FILE = "sampling.cu"
THREADS = 1024  # SAMPLE_THREADS: a row's top-k candidates are held one per thread
_KERNEL_TYPES = {np.dtype(np.float32), np.dtype(np.float16), np.dtype("bfloat16")}


def _sample_tokens(logits, temperature, top_k, top_p, uniform):
    """(B,) int64 token ids; -1 for a row the kernel cannot hold (over THREADS candidates, or top-p
    without top-k): the caller samples that row on the host with the same uniform number."""
    B, V = logits.shape
    if np.dtype(logits.dtype) not in _KERNEL_TYPES:  # float64: greedy rows here, the others the host's
        best = cp.argmax(logits, axis=-1)
        return cp.where(temperature == 0, best, -1).astype(np.int64)
    out = L.empty((B,), np.int64)
    if B:
        L.run(
            FILE,
            f"sample_tokens_{L.suffix(logits.dtype)}",
            B,
            THREADS,
            (
                L.contiguous(logits),
                L.contiguous(temperature.astype(np.float64, copy=False)),
                L.contiguous(top_k.astype(np.int64, copy=False)),
                L.contiguous(top_p.astype(np.float64, copy=False)),
                L.contiguous(uniform.astype(np.float64, copy=False)),
                out,
                L.i32(V),
            ),
        )
    return out


KERNELS = {"sample_tokens": _sample_tokens}
