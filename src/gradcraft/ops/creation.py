"""Creation ops: zeros, ones, full, arange, random tensors, and the random state.

Creation is lazy like every other op. Random ops take a fresh seed from the
global generator when they are built and store it in the node, so the
numbers are fixed from that moment: realizing twice (or recomputing a freed
intermediate) gives the same values.

Dropout is the exception: it runs inside training steps that a GPU records once as a CUDA graph and
replays, and a seed baked into a recorded kernel would give every replay the same masks. So each
device holds its dropout state in device memory, an int64 tensor [seed, counter] that the dropout
kernels read when they run:

- `manual_seed(s)` sets the seed to s (the key of every mask) and the counter to 0;
- `advance_dropout(device)`, called at the start of each training step inside the step, adds 1 to
  the counter with a kernel (an in-place assign): recorded in the graph, so every replay moves the
  counter exactly as an eager step does;
- each dropout node takes the state tensor as an input, plus a stream id fixed when it is built: its
  place among the dropout nodes built since the last advance (so the layers of one step, and the
  micro-batches of one step, get different masks, and a replay, which reuses the recorded ids, draws
  what the eager step drew).

A mask is a function of (seed, counter, stream, element index) alone (backend/cpu/dropout.py `_dropout`,
kernels/dropout.cu). The backward node reads the same state tensor with the same stream, and the
forward and backward of a step run after that step's advance and before the next one, so they see
the same counter and the backward regenerates the forward mask. (A lazy dropout tensor realized
only after a later advance or manual_seed would read another counter: the engine refuses it as
"modified in place", as for any other tensor written by `assign`.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TYPE_CHECKING
from gradcraft.backend import opspec
from gradcraft.tensor import Tensor, write_from_host
from gradcraft.typing import Number, DTypeLike, Device, Shape

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor

import math

import numpy as np

from gradcraft import dtypes
from gradcraft.device import canonical
from gradcraft.errors import RuntimeError_, TypeError_, UserError
from gradcraft.ops.function import apply, refuse_stale_readers
from gradcraft.ops.generator import Generator, default_generator, resolve

_MASK64 = (1 << 64) - 1
_dropout_seed = int(np.random.default_rng().integers(0, 2**63 - 1))  # the key of every dropout mask
_dropout_states: dict = {}  # device -> _DropoutState
_restored: dict = {}  # device -> (counter, streams) from set_rng_state, for a state not made yet


def manual_seed(seed: int) -> Generator:
    """Seed every random op that is built after this call (on every device), and dropout's state;
    returns the global generator, as torch."""
    global _dropout_seed
    default_generator.manual_seed(seed)
    _dropout_seed = int(seed) & _MASK64
    _restored.clear()
    for state in _dropout_states.values():
        state.set(_dropout_seed, 0, 0)
    return default_generator


def seed() -> int:
    """Seed the global generator from the operating system's entropy; returns the seed."""
    return manual_seed(int(np.random.default_rng().integers(0, 2**63 - 1))).initial_seed()


def initial_seed() -> int:
    return default_generator.initial_seed()


def get_rng_state() -> dict:
    """What `set_rng_state` needs to continue exactly (JSON-serializable): the host generator, the
    dropout seed, and each device's dropout counter (read back from the device) and stream count."""
    counters = dict(_restored)
    counters.update({device: state.get() for device, state in _dropout_states.items()})
    return {
        "generator": default_generator.host_state,
        "dropout_seed": _dropout_seed,
        "dropout": {device: list(value) for device, value in counters.items()},
    }


def set_rng_state(new_state: dict) -> None:
    global _dropout_seed
    if "generator" not in new_state:  # saved by an older version: the host generator's state alone
        default_generator.host_state = new_state
        return
    default_generator.host_state = new_state["generator"]
    _dropout_seed = int(new_state["dropout_seed"])
    _restored.clear()
    _restored.update({device: tuple(int(v) for v in value) for device, value in new_state["dropout"].items()})
    for device, dropout_state in _dropout_states.items():
        dropout_state.set(_dropout_seed, *_restored.pop(device, (0, 0)))


def next_seed(generator: Generator | None = None) -> int:
    """A seed for one random op, from `generator` (the global generator when None)."""
    return resolve(generator).next_seed()


class _DropoutState:
    """One device's dropout state: `tensor` = int64 [seed, counter] in device memory (its buffer never
    moves: a captured graph holds its address), and `streams`, the stream ids handed out since the
    counter last moved."""

    def __init__(self, device: str, seed: int, counter: int, streams: int):
        self.tensor = Tensor(_words(seed, counter), device=device)
        refuse_stale_readers(self.tensor)  # (a stale mask and its later backward would disagree)
        self.one_step = Tensor(np.array([0, 1], dtype=np.int64), device=device)  # the seed stays
        self.streams = streams

    def set(self, seed: int, counter: int, streams: int) -> None:
        """Overwrite in place (outside any captured step: a host-to-device copy)."""
        # (lazy dropout nodes built before now would read other masks: they refuse, as the state
        # refuses stale readers)
        write_from_host(self.tensor, _words(seed, counter))
        self.streams = streams

    def get(self) -> tuple:
        """(counter, streams); waits for the device."""
        return int(self.tensor.numpy()[1]), self.streams


def _words(seed: int, counter: int) -> np.ndarray:
    return np.array([seed & _MASK64, counter & _MASK64], dtype=np.uint64).view(np.int64)


def _dropout_state(device: str) -> _DropoutState:
    state = _dropout_states.get(device)
    if state is None:
        state = _dropout_states[device] = _DropoutState(device, _dropout_seed, *_restored.pop(device, (0, 0)))
    return state


def dropout_stream(device: str):
    """(the device's [seed, counter] tensor, a fresh stream id) for one dropout node."""
    state = _dropout_state(device)
    stream = state.streams
    state.streams += 1
    return state.tensor, stream


def advance_dropout(device=None) -> None:
    """Start a new step of dropout masks on `device`: the counter moves on by one and the stream ids
    start again from 0. Call it once at the start of each training step, inside the step: on a GPU the
    move is a kernel recorded with the step, so each replay of a captured step draws new masks, the
    ones the same step run eagerly would draw."""
    state = _dropout_state(canonical(device))
    state.tensor.assign(state.tensor + state.one_step).realize()
    state.streams = 0


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


def full(
    size: Shape, fill_value: Number, *, dtype: DTypeLike = None, device: Device = None, requires_grad: bool = False
) -> Tensor:
    if dtype is None:
        dtype = (
            dtypes.bool_
            if isinstance(fill_value, bool)
            else dtypes.default_int
            if isinstance(fill_value, int)
            else dtypes.default_float
        )
    return _creation(opspec.FULL, _shape((size,)), dtype, device, requires_grad, value=fill_value)


def zeros(
    *size: int | Sequence[int], dtype: DTypeLike = None, device: Device = None, requires_grad: bool = False
) -> Tensor:
    return _creation(opspec.FULL, _shape(size), dtype, device, requires_grad, value=0)


def ones(
    *size: int | Sequence[int], dtype: DTypeLike = None, device: Device = None, requires_grad: bool = False
) -> Tensor:
    return _creation(opspec.FULL, _shape(size), dtype, device, requires_grad, value=1)


def empty(
    *size: int | Sequence[int], dtype: DTypeLike = None, device: Device = None, requires_grad: bool = False
) -> Tensor:
    return zeros(*size, dtype=dtype, device=device, requires_grad=requires_grad)


def arange(
    start: Number,
    end: Number | None = None,
    step: Number = 1,
    *,
    dtype: DTypeLike = None,
    device: Device = None,
    requires_grad: bool = False,
) -> Tensor:
    if end is None:
        start, end = 0, start
    if step == 0:
        raise UserError("arange step must be non-zero")
    if dtype is None:
        dtype = dtypes.default_int if all(isinstance(v, int) for v in (start, end, step)) else dtypes.default_float
    n = max(0, math.ceil((end - start) / step))
    return _creation(opspec.ARANGE, (n,), dtype, device, requires_grad, start=start, stop=end, step=step)


def rand(
    *size: int | Sequence[int],
    generator: Generator | None = None,
    dtype: DTypeLike = None,
    device: Device = None,
    requires_grad: bool = False,
    **kwargs: Shape,
) -> Tensor:
    size = _size_argument("rand", size, kwargs)
    return _creation(opspec.RAND, _shape(size), dtype, device, requires_grad, seed=next_seed(generator))


def randn(
    *size: int | Sequence[int],
    generator: Generator | None = None,
    dtype: DTypeLike = None,
    device: Device = None,
    requires_grad: bool = False,
    **kwargs: Shape,
) -> Tensor:
    size = _size_argument("randn", size, kwargs)
    return _creation(opspec.RANDN, _shape(size), dtype, device, requires_grad, seed=next_seed(generator))


def _size_argument(name: str, size: tuple, kwargs: dict) -> tuple:
    """The shape given positionally or as `size=`, as torch's factories take it."""
    if set(kwargs) - {"size"} or (size and "size" in kwargs):
        raise TypeError_(f"{name}() received an invalid combination of arguments: {sorted(kwargs)}")
    return (kwargs["size"],) if "size" in kwargs else size


def randint(
    *args: int | Shape,
    generator: Generator | None = None,
    dtype: DTypeLike = None,
    device: Device = None,
    requires_grad: bool = False,
    **kwargs: int | Shape,
) -> Tensor:
    """Integers drawn uniformly from [low, high): torch's overloads `randint(high, size)` and
    `randint(low, high, size)`, each also with keywords (`randint(0, 10, size=(3,))`, `low=`, `high=`)."""
    low, high, size = _randint_arguments(args, kwargs)
    if high <= low:
        raise RuntimeError_(f"random_ expects 'from' to be less than 'to', but got from={low} >= to={high}")
    out = _creation(
        opspec.RANDINT,
        _shape((size,)),
        dtype or dtypes.default_int,
        device,
        False,
        low=low,
        high=high,
        seed=next_seed(generator),
    )
    if requires_grad:
        out.requires_grad = True  # refused for integer dtypes, as torch refuses it
    return out


def _randint_arguments(args: tuple, kwargs: dict) -> tuple:
    unknown = set(kwargs) - {"low", "high", "size"}
    names = ("low", "high", "size") if len(args) + len(kwargs) >= 3 else ("high", "size")
    values = dict(zip(names, args))
    if unknown or len(args) > 3 or set(values) & set(kwargs):
        raise TypeError_(f"randint() received an invalid combination of arguments: {len(args)} positional, {kwargs}")
    values.update(kwargs)
    if "size" not in values or "high" not in values:
        raise TypeError_("randint() missing required arguments: randint(low=0, high, size, *, generator=None, ...)")
    size = values["size"]
    if not isinstance(size, (tuple, list)):
        raise TypeError_(f"randint(): argument 'size' must be a tuple of ints, not {type(size).__name__}")
    return int(values.get("low", 0)), int(values["high"]), tuple(size)


def _like(fn, x, dtype, device, **kwargs):
    return fn(x.shape, dtype=dtype or x.dtype, device=device or x.device, **kwargs)


def zeros_like(input: Tensor, *, dtype: DTypeLike = None, device: Device = None, requires_grad: bool = False) -> Tensor:
    return _like(zeros, input, dtype, device, requires_grad=requires_grad)


def ones_like(input: Tensor, *, dtype: DTypeLike = None, device: Device = None, requires_grad: bool = False) -> Tensor:
    return _like(ones, input, dtype, device, requires_grad=requires_grad)


def full_like(
    input: Tensor, fill_value: Number, *, dtype: DTypeLike = None, device: Device = None, requires_grad: bool = False
) -> Tensor:
    return full(
        input.shape, fill_value, dtype=dtype or input.dtype, device=device or input.device, requires_grad=requires_grad
    )


def rand_like(input: Tensor, *, dtype: DTypeLike = None, device: Device = None, requires_grad: bool = False) -> Tensor:
    return _like(rand, input, dtype, device, requires_grad=requires_grad)


def randn_like(input: Tensor, *, dtype: DTypeLike = None, device: Device = None, requires_grad: bool = False) -> Tensor:
    return _like(randn, input, dtype, device, requires_grad=requires_grad)


def eye(
    n: int, m: int | None = None, *, dtype: DTypeLike = None, device: Device = None, requires_grad: bool = False
) -> Tensor:
    from gradcraft.ops.elementwise import eq

    rows = arange(n, device=device).reshape(n, 1)
    cols = arange(m if m is not None else n, device=device).reshape(1, -1)
    out = eq(rows, cols).to(dtype or dtypes.default_float)
    if requires_grad:
        out = out.realize()
        out.requires_grad = True
    return out


def tensor(data: Any, *, dtype: DTypeLike = None, device: Device = None, requires_grad: bool = False) -> Tensor:
    return Tensor(data, dtype=dtype, device=device, requires_grad=requires_grad)


def empty_like(input: Tensor, *, dtype: DTypeLike = None, device: Device = None, requires_grad: bool = False) -> Tensor:
    return zeros_like(input, dtype=dtype, device=device, requires_grad=requires_grad)


def linspace(
    start: float, end: float, steps: int, *, dtype: DTypeLike = None, device: Device = None, requires_grad: bool = False
) -> Tensor:
    """`steps` evenly spaced values from start to end inclusive; the second half is counted back from
    `end`, as PyTorch does, so both ends are exact."""
    if steps < 0:
        raise UserError(f"linspace: number of steps must be non-negative, got {steps}")
    dtype = dtypes.to_dtype(dtype) if dtype is not None else dtypes.default_float
    i = np.arange(steps, dtype=np.float64)
    step = (end - start) / (steps - 1) if steps > 1 else 0.0
    values = (
        np.where(i < steps // 2, start + step * i, end - step * (steps - 1 - i))
        if steps > 1
        else np.full(steps, float(start))
    )
    out = Tensor(
        values.astype(dtype.np if dtype.is_floating_point else np.float64), dtype=dtype, device=canonical(device)
    )
    out.requires_grad = requires_grad
    return out


def logspace(
    start: float,
    end: float,
    steps: int,
    base: float = 10.0,
    *,
    dtype: DTypeLike = None,
    device: Device = None,
    requires_grad: bool = False,
) -> Tensor:
    from gradcraft.ops.elementwise import pow

    out = pow(base, linspace(start, end, steps, dtype=dtypes.float64, device=device)).to(dtype or dtypes.default_float)
    if requires_grad:
        out = out.realize()
        out.requires_grad = True
    return out


def from_numpy(ndarray: np.ndarray) -> Tensor:
    """A tensor with the array's dtype and values (float64 stays float64, as in PyTorch)."""
    if not isinstance(ndarray, np.ndarray):
        raise TypeError_(f"from_numpy expects a numpy.ndarray, got {type(ndarray).__name__}; use gradcraft.tensor()")
    return Tensor(ndarray, dtype=dtypes.to_dtype(ndarray.dtype), device="cpu")  # the CPU whatever the default


def as_tensor(data: Any, dtype: DTypeLike = None, device: Device = None) -> Tensor:
    if isinstance(data, Tensor):
        return data.to(*(a for a in (device, dtype) if a is not None))
    if isinstance(data, np.ndarray) and dtype is None:
        return Tensor(data, dtype=dtypes.to_dtype(data.dtype), device=device)
    return Tensor(data, dtype=dtype, device=device)


def randperm(
    n: int,
    *,
    generator: Generator | None = None,
    dtype: DTypeLike = None,
    device: Device = None,
    requires_grad: bool = False,
) -> Tensor:
    """A random permutation of 0..n-1 (drawn on the host, from the generator's next seed)."""
    if n < 0:
        raise RuntimeError_(f"n must be non-negative, got {n}")
    order = resolve(generator).numpy_rng().permutation(int(n))
    out = Tensor(order, dtype=dtype or dtypes.default_int, device=canonical(device))
    out.requires_grad = requires_grad
    return out


def randint_like(
    input: Tensor,
    low: int,
    high: int | None = None,
    *,
    dtype: DTypeLike = None,
    device: Device = None,
    requires_grad: bool = False,
) -> Tensor:
    low, high = (0, low) if high is None else (low, high)
    return randint(
        low, high, input.shape, dtype=dtype or input.dtype, device=device or input.device, requires_grad=requires_grad
    )
