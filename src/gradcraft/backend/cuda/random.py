"""Random tensors: launchers for kernels/random.cu's counter-based generators (a seed gives the same
numbers every time, so recomputing a lazy random tensor is exact). backend/cpu/random.py is their
counterpart."""

import numpy as np

from gradcraft.backend.cuda import launch as L


def _random(kind):
    def kernel(shape, seed, dtype):
        dtype = np.dtype(dtype)
        out = L.empty(shape, dtype)
        if out.size:
            L.run(
                "random.cu",
                f"{kind}_{L.suffix(dtype)}",
                L.grid_1d(out.size, 256, 4),  # 4 values a thread
                256,
                (out, L.i64(out.size), np.uint64(seed)),
            )
        return out

    return kernel


def _randint(shape, low, high, seed, dtype):
    out = L.empty(shape, np.int64)
    if out.size:
        L.run(
            "random.cu",
            "randint_i64",
            L.grid_1d(out.size, 256, 4),  # 4 values a thread
            256,
            (out, L.i64(out.size), np.uint64(seed), L.i64(low), L.i64(high)),
        )
    return out.astype(dtype, copy=False)


KERNELS = {"rand": _random("rand"), "randn": _random("randn"), "randint": _randint}
