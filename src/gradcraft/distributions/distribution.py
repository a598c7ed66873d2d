"""torch.distributions.Distribution: the base class, and the helpers the distributions share.

A distribution holds its parameters as Tensors, broadcast together; `batch_shape` is their shape
(less the event dimensions) and `event_shape` the shape of one draw. `sample(sample_shape)` draws
without recording a graph; `rsample` (where the distribution has one) draws by the
reparameterization trick, so gradients flow into the parameters. The random numbers come from
gradcraft's generator (gc.manual_seed), not PyTorch's.
"""

from __future__ import annotations

import math

import numpy as np

import gradcraft as gc


class Distribution:
    has_rsample = False
    has_enumerate_support = False
    arg_constraints: dict = {}
    _validate_args = __debug__

    def __init__(self, batch_shape=(), event_shape=(), validate_args=None):
        self._batch_shape = gc.Size(tuple(batch_shape))
        self._event_shape = gc.Size(tuple(event_shape))
        if validate_args is not None:
            self._validate_args = validate_args

    @staticmethod
    def set_default_validate_args(value: bool) -> None:
        Distribution._validate_args = bool(value)

    @property
    def batch_shape(self):
        return self._batch_shape

    @property
    def event_shape(self):
        return self._event_shape

    @property
    def mean(self):
        raise NotImplementedError(f"{type(self).__name__} has no mean")

    @property
    def mode(self):
        raise NotImplementedError(f"{type(self).__name__} does not implement mode")

    @property
    def variance(self):
        raise NotImplementedError(f"{type(self).__name__} has no variance")

    @property
    def stddev(self):
        return self.variance.sqrt()

    def sample(self, sample_shape=()):
        with gc.no_grad():
            return self.rsample(sample_shape)

    def rsample(self, sample_shape=()):
        raise NotImplementedError(f"{type(self).__name__} has no rsample (it is not reparameterizable)")

    def sample_n(self, n: int):
        return self.sample((n,))

    def log_prob(self, value):
        raise NotImplementedError

    def entropy(self):
        raise NotImplementedError

    def cdf(self, value):
        raise NotImplementedError

    def perplexity(self):
        return self.entropy().exp()

    def _extended_shape(self, sample_shape=()) -> tuple:
        if isinstance(sample_shape, int):
            sample_shape = (sample_shape,)
        return tuple(sample_shape) + tuple(self._batch_shape) + tuple(self._event_shape)

    def _check(self, ok: bool, name: str, constraint: str, value) -> None:
        if self._validate_args and not ok:
            raise ValueError(
                f"Expected parameter {name} ({type(value).__name__} of shape {tuple(value.shape)}) of distribution "
                f"{self!r} to satisfy the constraint {constraint}, but found invalid values:\n{value}"
            )

    def __repr__(self) -> str:
        names = [k for k in self.arg_constraints if k in self.__dict__]
        args = ", ".join(
            f"{k}: {self.__dict__[k] if self.__dict__[k].numel() == 1 else tuple(self.__dict__[k].shape)}"
            for k in names
        )
        return f"{type(self).__name__}({args})"


def as_tensors(*values):
    """The parameters as Tensors of one broadcast shape (numbers take the tensors' dtype, or float32)."""
    dtype = next((v.dtype for v in values if isinstance(v, gc.Tensor) and v.dtype.is_floating_point), gc.float32)
    device = next((v.device for v in values if isinstance(v, gc.Tensor)), None)
    tensors = [v if isinstance(v, gc.Tensor) else gc.tensor(float(v), dtype=dtype, device=device) for v in values]
    tensors = [t if t.dtype.is_floating_point else t.to(dtype) for t in tensors]
    shape = broadcast_shape(*[t.shape for t in tensors])
    return [t if tuple(t.shape) == shape else t.expand(*shape) for t in tensors]


def broadcast_shape(*shapes) -> tuple:
    return tuple(np.broadcast_shapes(*[tuple(s) for s in shapes]))


def eps_of(dtype) -> float:
    return float(np.finfo(dtype.np if hasattr(dtype, "np") else np.float32).eps)


def clamp_probs(probs):
    eps = eps_of(probs.dtype)
    return probs.clamp(min=eps, max=1 - eps)


def probs_to_logits(probs, is_binary: bool = False):
    ps = clamp_probs(probs)
    return ps.log() - (-ps).log1p() if is_binary else ps.log()


def logits_to_probs(logits, is_binary: bool = False):
    return logits.sigmoid() if is_binary else logits.softmax(dim=-1)


def sum_rightmost(value, dims: int):
    return value if dims == 0 else value.reshape(*value.shape[: value.ndim - dims], -1).sum(-1)


def uniform(shape, like):
    """Uniform numbers in [0, 1) of `like`'s dtype and device."""
    return gc.rand(*shape, dtype=like.dtype, device=like.device) if shape else uniform((1,), like).reshape(())


def standard_normal(shape, like):
    return gc.randn(*shape, dtype=like.dtype, device=like.device) if shape else standard_normal((1,), like).reshape(())


HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
