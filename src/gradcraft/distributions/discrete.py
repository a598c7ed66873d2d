"""Bernoulli, Categorical and OneHotCategorical, parameterized by probs or by logits (exactly one),
with PyTorch's normalization, log_prob, entropy and moments. Drawing is not reparameterizable."""

from __future__ import annotations

import numpy as np

import gradcraft as gc
import gradcraft.nn.functional as F
from gradcraft.distributions.distribution import (
    Distribution,
    as_tensors,
    broadcast_shape,
    clamp_probs,
    logits_to_probs,
    probs_to_logits,
    uniform,
)


def _one_of(probs, logits):
    if (probs is None) == (logits is None):
        raise ValueError("Either `probs` or `logits` must be specified, but not both.")


class Bernoulli(Distribution):
    """Bernoulli(probs=None, logits=None): 1 with probability probs."""

    arg_constraints = {"probs": "Interval(lower_bound=0.0, upper_bound=1.0)", "logits": "Real()"}
    has_enumerate_support = True

    def __init__(self, probs=None, logits=None, validate_args=None):
        _one_of(probs, logits)
        if probs is not None:
            (self.probs,) = as_tensors(probs)
            self.logits = probs_to_logits(self.probs, is_binary=True)
        else:
            (self.logits,) = as_tensors(logits)
            self.probs = logits_to_probs(self.logits, is_binary=True)
        super().__init__(self.probs.shape, (), validate_args)
        if probs is not None and self._validate_args:
            ok = bool(((self.probs >= 0) & (self.probs <= 1)).all().item())
            self._check(ok, "probs", self.arg_constraints["probs"], self.probs)

    @property
    def param_shape(self):
        return self.probs.shape

    @property
    def mean(self):
        return self.probs

    @property
    def mode(self):
        mode = (self.probs >= 0.5).to(self.probs.dtype)
        return gc.where(self.probs == 0.5, gc.full_like(mode, float("nan")), mode)

    @property
    def variance(self):
        return self.probs * (1 - self.probs)

    def sample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        with gc.no_grad():
            return (uniform(shape, self.probs) < self.probs.expand(*shape)).to(self.probs.dtype)

    def log_prob(self, value):
        logits, value = as_tensors(self.logits, value)
        return -F.binary_cross_entropy_with_logits(logits, value, reduction="none")

    def entropy(self):
        return F.binary_cross_entropy_with_logits(self.logits, self.probs, reduction="none")

    def enumerate_support(self, expand: bool = True):
        values = gc.tensor([0.0, 1.0], dtype=self.probs.dtype).reshape(2, *([1] * len(self.batch_shape)))
        return values.expand(2, *self.batch_shape) if expand else values


class Categorical(Distribution):
    """Categorical(probs=None, logits=None) over the last dimension's K categories (the rest is the
    batch); probs are normalized to sum to 1, logits to log-probabilities."""

    arg_constraints = {"probs": "Simplex()", "logits": "IndependentConstraint(Real(), 1)"}
    has_enumerate_support = True

    def __init__(self, probs=None, logits=None, validate_args=None):
        _one_of(probs, logits)
        if probs is not None:
            if probs.ndim < 1:
                raise ValueError("`probs` parameter must be at least one-dimensional.")
            self.probs = probs / probs.sum(-1, keepdim=True)
            self.logits = probs_to_logits(self.probs)
            if Distribution._validate_args if validate_args is None else validate_args:
                self._validate_args = True
                self._check(bool((self.probs >= 0).all().item()), "probs", "Simplex()", self.probs)
        else:
            if logits.ndim < 1:
                raise ValueError("`logits` parameter must be at least one-dimensional.")
            self.logits = logits - logits.logsumexp(dim=-1, keepdim=True)
            self.probs = logits_to_probs(self.logits)
        self._num_events = self.probs.shape[-1]
        super().__init__(self.probs.shape[:-1], (), validate_args)

    @property
    def param_shape(self):
        return self.probs.shape

    @property
    def mean(self):
        return gc.full(self._extended_shape(), float("nan"), dtype=self.probs.dtype)

    @property
    def mode(self):
        return self.probs.argmax(dim=-1)

    @property
    def variance(self):
        return gc.full(self._extended_shape(), float("nan"), dtype=self.probs.dtype)

    def sample(self, sample_shape=()):
        """Inverse-CDF draws: the number of categories whose cumulative probability is below u."""
        if isinstance(sample_shape, int):
            sample_shape = (sample_shape,)
        shape = tuple(sample_shape) + tuple(self.batch_shape)
        with gc.no_grad():
            cdf = self.probs.cumsum(dim=-1)
            u = uniform(shape + (1,), self.probs) * cdf[..., -1:]
            index = (cdf.expand(*shape, self._num_events) <= u).sum(dim=-1)
            return index.clamp(max=self._num_events - 1).long()

    def log_prob(self, value):
        value = value.long().unsqueeze(-1)
        batch = tuple(self.logits.shape[:-1])
        shape = broadcast_shape(value.shape[:-1], batch)
        value = value.expand(*shape, 1)
        log_pmf = self.logits.expand(*shape, self._num_events)
        return log_pmf.gather(-1, value).squeeze(-1)

    def entropy(self):
        min_real = float(np.finfo(self.logits.dtype.np).min)
        logits = self.logits.clamp(min=min_real)
        return -(logits * self.probs).sum(-1)

    def enumerate_support(self, expand: bool = True):
        values = gc.arange(self._num_events).reshape(-1, *([1] * len(self.batch_shape)))
        return values.expand(self._num_events, *self.batch_shape) if expand else values


class OneHotCategorical(Distribution):
    """A Categorical whose draws are one-hot vectors (event_shape (K,))."""

    arg_constraints = Categorical.arg_constraints
    has_enumerate_support = True

    def __init__(self, probs=None, logits=None, validate_args=None):
        self._categorical = Categorical(probs, logits, validate_args)
        batch = self._categorical.batch_shape
        super().__init__(batch, self._categorical.param_shape[-1:], validate_args)

    @property
    def probs(self):
        return self._categorical.probs

    @property
    def logits(self):
        return self._categorical.logits

    @property
    def param_shape(self):
        return self._categorical.param_shape

    @property
    def mean(self):
        return self.probs

    @property
    def mode(self):
        return F.one_hot(self.probs.argmax(dim=-1), self.probs.shape[-1]).to(self.probs.dtype)

    @property
    def variance(self):
        return self.probs * (1 - self.probs)

    def sample(self, sample_shape=()):
        index = self._categorical.sample(sample_shape)
        return F.one_hot(index, self.probs.shape[-1]).to(self.probs.dtype)

    def log_prob(self, value):
        return self._categorical.log_prob(value.argmax(dim=-1))

    def entropy(self):
        return self._categorical.entropy()

    def enumerate_support(self, expand: bool = True):
        n = self.event_shape[0]
        values = gc.eye(n, dtype=self.probs.dtype).reshape(n, *([1] * len(self.batch_shape)), n)
        return values.expand(n, *self.batch_shape, n) if expand else values


__all__ = ["Bernoulli", "Categorical", "OneHotCategorical", "clamp_probs"]
