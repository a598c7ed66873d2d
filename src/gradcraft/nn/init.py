"""Parameter initialisation. Each function fills a Parameter in place and returns it."""

import math

from gradcraft.ops.creation import randn, zeros


def _fill(p, value):
    p.data = value.to(p.device).to(p.dtype)
    return p


def normal_(tensor, mean: float = 0.0, std: float = 1.0):
    return _fill(tensor, randn(tensor.shape) * std + mean)


def zeros_(tensor):
    return _fill(tensor, zeros(tensor.shape))


def ones_(tensor):
    return _fill(tensor, zeros(tensor.shape) + 1.0)


def uniform_(tensor, a: float = 0.0, b: float = 1.0):
    from gradcraft.ops.creation import rand

    return _fill(tensor, rand(tensor.shape) * (b - a) + a)


def kaiming_uniform_linear_(p, fan_in: int):
    """PyTorch's default nn.Linear init: U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    bound = 1.0 / math.sqrt(fan_in) if fan_in else 0.0
    return uniform_(p, -bound, bound)


def scaled_residual_std(std: float, n_layers: int) -> float:
    """GPT-2's init for projections into the residual stream: std / sqrt(2 * n_layers)."""
    return std / math.sqrt(2 * n_layers)


# ---------------------------------------------------------------- torch.nn.init's other names


def constant_(tensor, val: float):
    return _fill(tensor, zeros(tensor.shape) + val)


def _fans(p) -> tuple:
    if p.ndim < 2:
        raise ValueError("fan in and fan out cannot be computed for a tensor with fewer than 2 dimensions")
    receptive = math.prod(p.shape[2:])
    return p.shape[1] * receptive, p.shape[0] * receptive


def calculate_gain(nonlinearity: str, param=None) -> float:
    gains = {
        "linear": 1.0,
        "sigmoid": 1.0,
        "conv1d": 1.0,
        "conv2d": 1.0,
        "tanh": 5.0 / 3,
        "relu": math.sqrt(2.0),
        "selu": 3.0 / 4,
    }
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        return math.sqrt(2.0 / (1 + slope**2))
    if nonlinearity not in gains:
        raise ValueError(f"unsupported nonlinearity {nonlinearity!r}")
    return gains[nonlinearity]


def xavier_uniform_(tensor, gain: float = 1.0):
    fan_in, fan_out = _fans(tensor)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(tensor, -bound, bound)


def xavier_normal_(tensor, gain: float = 1.0):
    fan_in, fan_out = _fans(tensor)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)))


def _kaiming_std(p, a, mode, nonlinearity) -> float:
    fan_in, fan_out = _fans(p)
    fan = fan_in if mode == "fan_in" else fan_out
    return calculate_gain(nonlinearity, a) / math.sqrt(fan)


def kaiming_uniform_(tensor, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu"):
    bound = math.sqrt(3.0) * _kaiming_std(tensor, a, mode, nonlinearity)
    return uniform_(tensor, -bound, bound)


def kaiming_normal_(tensor, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu"):
    return normal_(tensor, 0.0, _kaiming_std(tensor, a, mode, nonlinearity))


def trunc_normal_(tensor, mean: float = 0.0, std: float = 1.0, a: float = -2.0, b: float = 2.0):
    """Normal values redrawn until they fall in [a, b] (drawn on the host)."""
    import numpy as np

    from gradcraft.ops.creation import next_seed
    from gradcraft.tensor import Tensor

    rng = np.random.default_rng(next_seed())
    values = rng.normal(mean, std, size=tensor.shape)
    bad = (values < a) | (values > b)
    while bad.any():
        values[bad] = rng.normal(mean, std, size=int(bad.sum()))
        bad = (values < a) | (values > b)
    return _fill(tensor, Tensor(values.astype(np.float32)))
