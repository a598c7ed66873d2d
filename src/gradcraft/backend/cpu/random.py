"""Random tensors from counter-based generators (cuda/kernels/random.cu): a seed gives the same
numbers every time, so recomputing a lazy random tensor is exact."""

import numpy as np

from gradcraft.backend.cpu.common import _HALF, _finish, stats


def _generator(seed):
    # Counter-based: the same seed gives the same numbers, so recomputing a lazy random tensor is exact.
    return np.random.Generator(np.random.Philox(key=seed))


def _rand(shape, seed, dtype):
    return _finish(
        _generator(seed).random(shape, dtype=np.float64).astype(np.float32)
        if np.dtype(dtype) != np.float64
        else _generator(seed).random(shape),
        dtype,
    )


def _randn(shape, seed, dtype):
    return _finish(
        _generator(seed).standard_normal(shape).astype(np.dtype(dtype) if np.dtype(dtype) not in _HALF else np.float32),
        dtype,
    )


def _randint(shape, low, high, seed, dtype):
    return stats.track(_generator(seed).integers(low, high, size=shape).astype(dtype))


KERNELS = {"rand": _rand, "randn": _randn, "randint": _randint}
