"""Normal, Uniform, Exponential and Laplace, with PyTorch's formulas (log_prob, entropy, moments)
and reparameterized sampling (rsample: gradients flow into the parameters)."""

from __future__ import annotations

import math

import gradcraft as gc
from gradcraft.distributions.distribution import (
    HALF_LOG_2PI,
    Distribution,
    as_tensors,
    eps_of,
    standard_normal,
    uniform,
)


def _all(condition) -> bool:
    return bool(condition.all().item())


class Normal(Distribution):
    """Normal(loc, scale): scale is the standard deviation."""

    arg_constraints = {"loc": "Real()", "scale": "GreaterThan(lower_bound=0.0)"}
    has_rsample = True

    def __init__(self, loc, scale, validate_args=None):
        self.loc, self.scale = as_tensors(loc, scale)
        super().__init__(self.loc.shape, (), validate_args)
        if self._validate_args:
            self._check(_all(self.scale > 0), "scale", self.arg_constraints["scale"], self.scale)

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @property
    def stddev(self):
        return self.scale

    @property
    def variance(self):
        return self.scale**2

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        return self.loc + standard_normal(shape, self.loc) * self.scale

    def log_prob(self, value):
        return -((value - self.loc) ** 2) / (2 * self.variance) - self.scale.log() - HALF_LOG_2PI

    def entropy(self):
        return 0.5 + HALF_LOG_2PI + self.scale.log()

    def cdf(self, value):
        # (no erf op: the logistic approximation would be wrong; the exact form through tanh is not either)
        raise NotImplementedError("Normal.cdf needs erf, which gradcraft does not have")


class Uniform(Distribution):
    """Uniform(low, high) on [low, high)."""

    arg_constraints = {"low": "LessThan(high)", "high": "GreaterThan(low)"}
    has_rsample = True

    def __init__(self, low, high, validate_args=None):
        self.low, self.high = as_tensors(low, high)
        super().__init__(self.low.shape, (), validate_args)
        if self._validate_args:
            self._check(_all(self.low < self.high), "low", "LessThan(high)", self.low)

    @property
    def mean(self):
        return (self.high + self.low) / 2

    @property
    def mode(self):
        return self.low * float("nan")

    @property
    def stddev(self):
        return (self.high - self.low) / 12**0.5

    @property
    def variance(self):
        return (self.high - self.low) ** 2 / 12

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        return self.low + uniform(shape, self.low) * (self.high - self.low)

    def log_prob(self, value):
        inside = ((self.low <= value) & (self.high > value)).to(self.low.dtype)
        return inside.log() - (self.high - self.low).log()

    def cdf(self, value):
        return ((value - self.low) / (self.high - self.low)).clamp(min=0, max=1)

    def icdf(self, value):
        return value * (self.high - self.low) + self.low

    def entropy(self):
        return (self.high - self.low).log()


class Exponential(Distribution):
    """Exponential(rate): density rate * exp(-rate * x) on x >= 0."""

    arg_constraints = {"rate": "GreaterThan(lower_bound=0.0)"}
    has_rsample = True

    def __init__(self, rate, validate_args=None):
        (self.rate,) = as_tensors(rate)
        super().__init__(self.rate.shape, (), validate_args)
        if self._validate_args:
            self._check(_all(self.rate > 0), "rate", self.arg_constraints["rate"], self.rate)

    @property
    def mean(self):
        return self.rate.reciprocal()

    @property
    def mode(self):
        return gc.zeros_like(self.rate)

    @property
    def stddev(self):
        return self.rate.reciprocal()

    @property
    def variance(self):
        return self.rate**-2

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        return -(-uniform(shape, self.rate)).log1p() / self.rate

    def log_prob(self, value):
        return self.rate.log() - self.rate * value

    def cdf(self, value):
        return 1 - (-self.rate * value).exp()

    def icdf(self, value):
        return -(-value).log1p() / self.rate

    def entropy(self):
        return 1.0 - self.rate.log()


class Laplace(Distribution):
    """Laplace(loc, scale): density exp(-|x - loc| / scale) / (2 scale)."""

    arg_constraints = {"loc": "Real()", "scale": "GreaterThan(lower_bound=0.0)"}
    has_rsample = True

    def __init__(self, loc, scale, validate_args=None):
        self.loc, self.scale = as_tensors(loc, scale)
        super().__init__(self.loc.shape, (), validate_args)
        if self._validate_args:
            self._check(_all(self.scale > 0), "scale", self.arg_constraints["scale"], self.scale)

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @property
    def stddev(self):
        return math.sqrt(2) * self.scale

    @property
    def variance(self):
        return 2 * self.scale**2

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        eps = eps_of(self.loc.dtype)
        u = uniform(shape, self.loc) * (2 - eps) + (eps - 1)  # (-1 + eps, 1), PyTorch's interval
        return self.loc - self.scale * u.sign() * (-u.abs()).log1p()

    def log_prob(self, value):
        return -(2 * self.scale).log() - (value - self.loc).abs() / self.scale

    def cdf(self, value):
        return 0.5 - 0.5 * (value - self.loc).sign() * (-(value - self.loc).abs() / self.scale).expm1()

    def entropy(self):
        return 1 + (2 * self.scale).log()
