"""Parameter initialisation. Each function fills a Parameter in place and returns it."""

import math

from gradcraft.ops.creation import randn, zeros


def _fill(p, value):
    p._buf = value.to(p.device).to(p.dtype).realize()._buf
    p._version += 1
    return p


def normal_(p, mean: float = 0.0, std: float = 1.0):
    return _fill(p, randn(p.shape) * std + mean)


def zeros_(p):
    return _fill(p, zeros(p.shape))


def ones_(p):
    return _fill(p, zeros(p.shape) + 1.0)


def uniform_(p, a: float = 0.0, b: float = 1.0):
    from gradcraft.ops.creation import rand
    return _fill(p, rand(p.shape) * (b - a) + a)


def kaiming_uniform_linear_(p, fan_in: int):
    """PyTorch's default nn.Linear init: U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    bound = 1.0 / math.sqrt(fan_in) if fan_in else 0.0
    return uniform_(p, -bound, bound)


def scaled_residual_std(std: float, n_layers: int) -> float:
    """GPT-2's init for projections into the residual stream: std / sqrt(2 * n_layers)."""
    return std / math.sqrt(2 * n_layers)
