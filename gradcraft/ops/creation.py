"""Creation ops: zeros, ones, full, arange, random tensors, and the global seed.

Creation is lazy like every other op. Random ops take a fresh seed from the
global generator when they are built and store it in the node, so the
numbers are fixed from that moment: realizing twice (or recomputing a freed
intermediate) gives the same values.
"""

import math

import numpy as np

from gradcraft import dtypes
from gradcraft.device import canonical
from gradcraft.errors import UserError
from gradcraft.ops.function import apply

_seed_source = np.random.default_rng()


def manual_seed(seed: int) -> None:
    """Seed every random op that is built after this call (on every device)."""
    global _seed_source
    _seed_source = np.random.default_rng(seed)


def get_rng_state() -> dict:
    return _seed_source.bit_generator.state


def set_rng_state(state: dict) -> None:
    _seed_source.bit_generator.state = state


def next_seed() -> int:
    return int(_seed_source.integers(0, 2**63 - 1))


def _shape(size) -> tuple:
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = size[0]
    shape = tuple(int(n) for n in size)
    if any(n < 0 for n in shape):
        raise UserError(f"negative dimension in shape {shape}")
    return shape


def _creation(op, shape, dtype, device, requires_grad, **attrs):
    dtype = dtypes.to_dtype(dtype) if dtype is not None else dtypes.default_float
    out = apply(op, (), dict(attrs, shape=shape, dtype=dtype.np), shape, dtype, device=canonical(device))
    if requires_grad:
        out = out.realize()
        out.requires_grad = True
    return out


def full(size, fill_value, *, dtype=None, device=None, requires_grad=False):
    if dtype is None:
        dtype = (dtypes.bool_ if isinstance(fill_value, bool) else
                 dtypes.default_int if isinstance(fill_value, int) else dtypes.default_float)
    return _creation("full", _shape((size,)), dtype, device, requires_grad, value=fill_value)


def zeros(*size, dtype=None, device=None, requires_grad=False):
    return _creation("full", _shape(size), dtype, device, requires_grad, value=0)


def ones(*size, dtype=None, device=None, requires_grad=False):
    return _creation("full", _shape(size), dtype, device, requires_grad, value=1)


def empty(*size, dtype=None, device=None, requires_grad=False):
    return zeros(*size, dtype=dtype, device=device, requires_grad=requires_grad)


def arange(start, end=None, step=1, *, dtype=None, device=None, requires_grad=False):
    if end is None:
        start, end = 0, start
    if step == 0:
        raise UserError("arange step must be non-zero")
    if dtype is None:
        dtype = dtypes.default_int if all(isinstance(v, int) for v in (start, end, step)) else dtypes.default_float
    n = max(0, math.ceil((end - start) / step))
    return _creation("arange", (n,), dtype, device, requires_grad, start=start, stop=end, step=step)


def rand(*size, dtype=None, device=None, requires_grad=False):
    return _creation("rand", _shape(size), dtype, device, requires_grad, seed=next_seed())


def randn(*size, dtype=None, device=None, requires_grad=False):
    return _creation("randn", _shape(size), dtype, device, requires_grad, seed=next_seed())


def randint(low, high=None, size=(), *, dtype=None, device=None):
    if high is None:
        low, high = 0, low
    if high <= low:
        raise UserError(f"randint needs low < high, got {low} and {high}")
    return _creation("randint", _shape((size,)), dtype or dtypes.default_int, device, False,
                     low=low, high=high, seed=next_seed())


def _like(fn, x, dtype, device, **kwargs):
    return fn(x.shape, dtype=dtype or x.dtype, device=device or x.device, **kwargs)


def zeros_like(x, *, dtype=None, device=None, requires_grad=False):
    return _like(zeros, x, dtype, device, requires_grad=requires_grad)


def ones_like(x, *, dtype=None, device=None, requires_grad=False):
    return _like(ones, x, dtype, device, requires_grad=requires_grad)


def full_like(x, fill_value, *, dtype=None, device=None, requires_grad=False):
    return full(x.shape, fill_value, dtype=dtype or x.dtype, device=device or x.device, requires_grad=requires_grad)


def rand_like(x, *, dtype=None, device=None, requires_grad=False):
    return _like(rand, x, dtype, device, requires_grad=requires_grad)


def randn_like(x, *, dtype=None, device=None, requires_grad=False):
    return _like(randn, x, dtype, device, requires_grad=requires_grad)


def eye(n: int, m: int | None = None, *, dtype=None, device=None):
    from gradcraft.ops.elementwise import eq
    rows = arange(n, device=device).reshape(n, 1)
    cols = arange(m if m is not None else n, device=device).reshape(1, -1)
    return eq(rows, cols).to(dtype or dtypes.default_float)


def tensor(data, *, dtype=None, device=None, requires_grad=False):
    from gradcraft.tensor import Tensor
    return Tensor(data, dtype=dtype, device=device, requires_grad=requires_grad)
