"""Sampling ops: multinomial, normal, bernoulli, poisson, with PyTorch's overloads and `generator=`.

multinomial, normal and bernoulli are composed from the `rand`/`randn` kernels and ordinary ops, so
they stay lazy and run on the tensor's device (CPU or CUDA) without a copy to the host:

- multinomial with replacement inverts the cumulative distribution: a uniform number u times the row's
  total, and the category is the number of cumulative sums <= u (float64, so a category of small
  probability is not lost to rounding). Few samples of few categories compare every u with every
  sum; beyond _COMPARE_LIMIT comparisons (a WeightedRandomSampler over a whole dataset) the sums and
  the u's are sorted together instead, and each u's count is its place among them less its place
  among the u's;
- multinomial without replacement is the exponential race (the Gumbel-top-k trick): category i gets the
  key p_i / E_i with E_i ~ Exp(1), and the k largest keys, in order, are distributed as k draws without
  replacement, the first the first drawn;
- normal is mean + std * randn; bernoulli is rand < p.

poisson has no such form: its counts are drawn on the host by NumPy (from the generator's next
seed) and copied to the tensor's device.

PyTorch checks the probabilities of multinomial and bernoulli on the CPU (negative, inf or nan values,
an all-zero row): gradcraft does too for CPU tensors, which reads them (computes them first); on a GPU
the check would wait for the device, so it is skipped there (PyTorch's CUDA kernels assert instead).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from gradcraft import dtypes
from gradcraft.backend import opspec
from gradcraft.errors import RuntimeError_, TypeError_
from gradcraft.ops import elementwise as ew
from gradcraft.ops import movement as mv
from gradcraft.ops import reduce as rd
from gradcraft.ops.creation import _creation, _shape, next_seed
from gradcraft.ops.generator import Generator, resolve
from gradcraft.typing import Device, DTypeLike, Shape
from gradcraft.tensor import Tensor

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor


_COMPARE_LIMIT = 1 << 22  # rows x samples x categories compared at once, at most


def _uniform(shape, dtype, device, generator):
    return _creation(opspec.RAND, _shape((shape,)), dtype, device, False, seed=next_seed(generator))


def _gaussian(shape, dtype, device, generator):
    return _creation(opspec.RANDN, _shape((shape,)), dtype, device, False, seed=next_seed(generator))


def _check_probabilities(p, what: str) -> None:
    """PyTorch's CPU checks of a probability tensor (skipped on other devices: see the docstring)."""
    if p.device != "cpu":
        return
    values = p.detach().numpy().astype(np.float64)
    if not np.isfinite(values).all() or (values < 0).any():
        raise RuntimeError_("probability tensor contains either `inf`, `nan` or element < 0")
    if what == "multinomial" and (values.reshape(-1, values.shape[-1]).sum(-1) <= 0).any():
        raise RuntimeError_("invalid multinomial distribution (sum of probabilities <= 0)")
    if what == "bernoulli" and (values > 1).any():
        raise RuntimeError_("Expected p_in >= 0 && p_in <= 1 to be true, but got false.")


def multinomial(
    input: Tensor,
    num_samples: int,
    replacement: bool = False,
    *,
    generator: Generator | None = None,
    out: Tensor | None = None,
) -> Tensor:
    """`num_samples` category indices per row of `input` (1-D: one distribution; 2-D: one per row),
    drawn with probabilities proportional to the row's values; int64, shape (num_samples,) or
    (rows, num_samples). Without replacement no index repeats within a row."""
    if not input.dtype.is_floating_point:
        raise RuntimeError_(f"multinomial only supports floating-point dtypes for input, got: {input.dtype.name}")
    if input.ndim not in (1, 2):
        raise RuntimeError_("prob_dist must be 1 or 2 dim")
    num_samples = int(num_samples)
    if num_samples <= 0:
        raise RuntimeError_("cannot sample n_sample <= 0 samples")
    categories = input.shape[-1]
    if not replacement and num_samples > categories:
        raise RuntimeError_("cannot sample n_sample > prob_dist.size(-1) samples without replacement")
    _check_probabilities(input, "multinomial")
    rows = input.reshape(-1, categories).detach().to(dtypes.float64)  # (R, C)
    n_rows = rows.shape[0]
    if replacement:
        cdf = rd.cumsum(rows, dim=-1)  # (R, C)
        u = ew.mul(_uniform((n_rows, num_samples), dtypes.float64, input.device, generator), cdf[:, -1:])  # (R, S)
        index = ew.minimum(_count_at_or_below(cdf, u), categories - 1)
    else:
        u = _uniform((n_rows, categories), dtypes.float64, input.device, generator)  # [0, 1)
        exponential = ew.neg(ew.log(ew.sub(1.0, u)))  # Exp(1), never 0 * log(0)
        index = rd.topk(ew.div(rows, exponential), num_samples, dim=-1)[1]
    index = index.reshape(*input.shape[:-1], num_samples)
    return _into(out, index)


def _count_at_or_below(cdf, u):
    """For each u[r, j]: how many of cdf[r, :] (ascending) are <= it; int64, u's shape."""
    n_rows, categories = cdf.shape
    samples = u.shape[1]
    if n_rows * samples * categories <= _COMPARE_LIMIT:
        below = ew.le(cdf.reshape(n_rows, 1, categories), u.reshape(n_rows, samples, 1))  # (R, S, C)
        return rd.sum(below.to(dtypes.int64), dim=-1)
    # A stable sort of [cdf, u] puts each sum before a u equal to it: a u's place in the sorted row
    # counts the sums <= it plus the u's before it, which its place among the u's alone counts.
    place = rd.argsort(rd.argsort(mv.cat([cdf, u], dim=-1), dim=-1, stable=True), dim=-1, stable=True)  # (R, C+S)
    place_among_u = rd.argsort(rd.argsort(u, dim=-1, stable=True), dim=-1, stable=True)  # (R, S)
    return ew.sub(place[:, categories:], place_among_u)


def _into(out, result):
    """`out=`: the result becomes out's contents (resized to the result's shape, as PyTorch resizes)."""
    if out is None:
        return result
    out.data = result.to(out.dtype)
    return out


def normal(
    mean: Tensor | float = 0.0,
    std: Tensor | float = 1.0,
    size: Shape | None = None,
    *,
    generator: Generator | None = None,
    out: Tensor | None = None,
    dtype: DTypeLike = None,
    device: Device = None,
    requires_grad: bool = False,
) -> Tensor:
    """Normal samples: `normal(mean_tensor, std_tensor)`, `normal(mean_tensor, std=1.0)`,
    `normal(mean, std_tensor)` (the tensors' broadcast shape), or `normal(mean, std, size)` with
    floats. As in PyTorch, the result depends on mean and std for autograd, with zero gradient."""
    tensors = [v for v in (mean, std) if isinstance(v, Tensor)]
    if not tensors:
        if size is None:
            raise TypeError_("normal() received an invalid combination of arguments: with float mean and std, size=")
        if float(std) < 0:
            raise RuntimeError_(f"normal expects std >= 0.0, but found std {std:g}")
        noise = _gaussian(tuple(size), dtype, device, generator)
        result = ew.add(ew.mul(noise, float(std)), float(mean))
        if requires_grad:
            result = result.realize()
            result.requires_grad = True
        return _into(out, result)
    if size is not None:
        raise TypeError_("normal(): size= is only taken with float mean and std")
    if isinstance(std, Tensor):
        if std.device == "cpu" and (std.detach().numpy() < 0).any():
            raise RuntimeError_(f"normal expects all elements of std >= 0.0, got {std.detach().numpy().min():g}")
    elif float(std) < 0:
        raise RuntimeError_(f"normal expects std >= 0.0, but found std {std:g}")
    like = tensors[0]
    shape = ew.broadcast_shape(*(t.shape for t in tensors), "normal") if len(tensors) == 2 else like.shape
    float_dtype = like.dtype if like.dtype.is_floating_point else dtypes.default_float
    noise = _gaussian(shape, float_dtype, like.device, generator)
    plain = [v.detach() if isinstance(v, Tensor) else v for v in (mean, std)]
    result = ew.add(ew.mul(noise, plain[1]), plain[0])
    for t in tensors:  # PyTorch's gradient of normal with respect to mean and std is zero
        if t.requires_grad:
            result = ew.add(result, ew.mul(t, 0.0))
    return _into(out, result)


def bernoulli(
    input: Tensor, p: float | None = None, *, generator: Generator | None = None, out: Tensor | None = None
) -> Tensor:
    """1 with probability `input` (or `p`, a float, for every element), else 0; `input`'s dtype."""
    if p is None:
        _check_probabilities(input, "bernoulli")
        probability = input.detach()
    else:
        if not 0 <= float(p) <= 1:
            raise RuntimeError_(f"bernoulli_ expects p to be in [0, 1], but got p={p}")
        probability = float(p)
    dtype = input.dtype if input.dtype.is_floating_point else dtypes.default_float
    u = _uniform(input.shape, dtypes.float64 if dtype == dtypes.float64 else dtypes.float32, input.device, generator)
    return _into(out, ew.lt(u, probability).to(input.dtype))


def bernoulli_(x: Tensor, p: Tensor | float = 0.5, *, generator: Generator | None = None) -> Tensor:
    """In place: each element becomes 1 with probability p (a float or a tensor), else 0."""
    from gradcraft.ops.inplace import write

    if isinstance(p, Tensor):
        _check_probabilities(p, "bernoulli")
        probability = p.detach()
    else:
        if not 0 <= float(p) <= 1:
            raise RuntimeError_(f"bernoulli_ expects p to be in [0, 1], but got p={p}")
        probability = float(p)
    u = _uniform(x.shape, dtypes.float32, x.device, generator)
    return write(x, ew.lt(u, probability).to(x.dtype))


def random_(x: Tensor, *args: int, generator: Generator | None = None, **kwargs: int) -> Tensor:
    """In place: integers drawn uniformly from [from, to) (`random_(to)`, `random_(from, to)`); without
    bounds, from [0, 2**mantissa] for floating dtypes (every integer the dtype holds exactly) and
    [0, the dtype's maximum] for integers, as PyTorch."""
    from gradcraft.ops.creation import randint
    from gradcraft.ops.inplace import write

    bounds = dict(zip(("from", "to"), args) if len(args) == 2 else zip(("to",), args))
    bounds.update(kwargs)
    if set(bounds) - {"from", "to"} or len(args) > 2:
        raise TypeError_(f"random_() takes from and to, got {args} {kwargs}")
    low, high = int(bounds.get("from", 0)), bounds.get("to")
    if high is None:
        if x.dtype.is_floating_point:
            high = 2 ** (np.finfo(x.dtype.np if x.dtype.np.itemsize > 2 else np.float32).nmant + 1) + 1
        else:
            high = 2 if x.dtype == dtypes.bool_ else min(int(np.iinfo(x.dtype.np).max) + 1, 2**63 - 1)
    values = randint(low, int(high), x.shape, generator=generator, device=x.device)
    return write(x, values.to(x.dtype))


def poisson(input: Tensor, generator: Generator | None = None) -> Tensor:
    """Counts drawn from Poisson(rate = each element of `input`), in `input`'s dtype (on the host)."""
    if not input.dtype.is_floating_point:
        raise TypeError_(f'"poisson" is not implemented for {input.dtype.name}; pass floating-point rates')
    rates = input.detach().numpy().astype(np.float64)
    if not np.isfinite(rates).all() or (rates < 0).any():
        raise RuntimeError_("invalid Poisson rate, expected rate to be non-negative")
    counts = resolve(generator).numpy_rng().poisson(rates).astype(np.float64)
    return Tensor(counts, dtype=input.dtype, device=input.device)


def attach_methods(tensor_class_: type) -> None:
    """Tensor.multinomial, .bernoulli, .bernoulli_ and .random_, as PyTorch's methods."""
    tensor_class_.multinomial = multinomial
    tensor_class_.bernoulli = bernoulli
    tensor_class_.bernoulli_ = bernoulli_
    tensor_class_.random_ = random_
