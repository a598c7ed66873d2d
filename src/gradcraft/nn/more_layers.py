"""The rest of torch.nn's common activations and padding layers, composed from public ops with
PyTorch's formulas: ReLU6, Hardtanh, Hardsigmoid, Hardswish, Mish, SELU, CELU, Softsign, Softmin,
Tanhshrink, Softshrink, Hardshrink, Threshold (and their F.* forms); F.pad's 'reflect',
'replicate' and 'circular' modes (the convolutions' padding, gradcraft/ops/conv.py) with the
ZeroPad/ConstantPad/ReflectionPad/ReplicationPad/CircularPad 1d and 2d modules; CosineSimilarity."""

from __future__ import annotations

from gradcraft.errors import ValueError_
from gradcraft.nn.module import Module
from gradcraft.ops.elementwise import where

_SELU_ALPHA, _SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946


def hardtanh(input, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False):
    return _inplace(input, input.clamp(min_val, max_val), inplace)


def relu6(input, inplace: bool = False):
    return hardtanh(input, 0.0, 6.0, inplace)


def hardsigmoid(input, inplace: bool = False):
    return _inplace(input, (input / 6 + 0.5).clamp(0.0, 1.0), inplace)


def hardswish(input, inplace: bool = False):
    return _inplace(input, input * (input + 3).clamp(0.0, 6.0) / 6, inplace)


def mish(input, inplace: bool = False):
    from gradcraft.ops.losses import softplus

    return _inplace(input, input * softplus(input).tanh(), inplace)


def celu(input, alpha: float = 1.0, inplace: bool = False):
    negative = where(input > 0, 0.0, input)  # (exp of the negative part only: no overflow)
    return _inplace(input, where(input > 0, input, alpha * ((negative / alpha).exp() - 1)), inplace)


def selu(input, inplace: bool = False):
    negative = where(input > 0, 0.0, input)
    return _inplace(input, _SELU_SCALE * where(input > 0, input, _SELU_ALPHA * (negative.exp() - 1)), inplace)


def softsign(input):
    return input / (1 + input.abs())


def softmin(input, dim=None, _stacklevel: int = 3, dtype=None):
    """softmax(-input); without dim, PyTorch's implicit choice (0 for 0-, 1- and 3-d inputs, else 1)."""
    from gradcraft.ops.nn import softmax

    if dim is None:
        dim = 0 if input.ndim in (0, 1, 3) else 1
    return softmax(-input, dim, dtype)


def tanhshrink(input):
    return input - input.tanh()


def softshrink(input, lambd: float = 0.5):
    return where(input > lambd, input - lambd, where(input < -lambd, input + lambd, input * 0))


def hardshrink(input, lambd: float = 0.5):
    return where((input > lambd) | (input < -lambd), input, input * 0)


def threshold(input, threshold: float, value: float, inplace: bool = False):
    return _inplace(input, where(input > threshold, input, value), inplace)


def _inplace(input, result, inplace: bool):
    if not inplace:
        return result
    from gradcraft.ops.inplace import write

    return write(input, result)


class _Activation(Module):
    _args: tuple = ()

    def forward(self, input):
        return type(self).function(input, *(getattr(self, a) for a in self._args))

    def extra_repr(self) -> str:
        if self._args == ("lambd",):
            return f"{self.lambd}"
        return ", ".join(f"{a}={getattr(self, a)}" for a in self._args if a != "inplace" or self.inplace)


def _activation(name: str, function, args: tuple = (), defaults: tuple = ()):
    def __init__(self, *values, **named):
        Module.__init__(self)
        for a, default in zip(args, defaults):
            setattr(self, a, default)
        for a, v in zip(args, values):
            setattr(self, a, v)
        for a, v in named.items():
            if a not in args:
                raise TypeError(f"{name}.__init__() got an unexpected keyword argument '{a}'")
            setattr(self, a, v)

    import inspect

    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)] + [
        inspect.Parameter(a, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=d) for a, d in zip(args, defaults)
    ]
    __init__.__signature__ = inspect.Signature(params)
    return type(name, (_Activation,), {"__init__": __init__, "function": staticmethod(function), "_args": args})


ReLU6 = _activation("ReLU6", relu6, ("inplace",), (False,))
Hardsigmoid = _activation("Hardsigmoid", hardsigmoid, ("inplace",), (False,))
Hardswish = _activation("Hardswish", hardswish, ("inplace",), (False,))
Mish = _activation("Mish", mish, ("inplace",), (False,))
SELU = _activation("SELU", selu, ("inplace",), (False,))
CELU = _activation("CELU", celu, ("alpha", "inplace"), (1.0, False))
Softsign = _activation("Softsign", softsign)
Tanhshrink = _activation("Tanhshrink", tanhshrink)
Softshrink = _activation("Softshrink", softshrink, ("lambd",), (0.5,))
Hardshrink = _activation("Hardshrink", hardshrink, ("lambd",), (0.5,))


class Hardtanh(_Activation):
    _args = ("min_val", "max_val", "inplace")
    function = staticmethod(hardtanh)

    def __init__(
        self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False, min_value=None, max_value=None
    ) -> None:
        super().__init__()
        if min_value is not None or max_value is not None:
            import warnings

            warnings.warn(
                "keyword argument `min_value`/`max_value` is deprecated and renamed to `min_val`/`max_val`",
                FutureWarning,
                stacklevel=2,
            )
            min_val = min_val if min_value is None else min_value
            max_val = max_val if max_value is None else max_value
        if max_val <= min_val:
            raise ValueError_(f"max_val ({max_val}) must be greater than min_val ({min_val})")
        self.min_val, self.max_val, self.inplace = min_val, max_val, inplace


Threshold = _activation("Threshold", threshold, ("threshold", "value", "inplace"), (None, None, False))


class Softmin(Module):
    def __init__(self, dim=None) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return softmin(input, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


def pad(input, pad, mode: str = "constant", value=None):
    """F.pad: 'constant' (value, default 0), or 'reflect', 'replicate', 'circular' over the last
    len(pad) // 2 dimensions."""
    from gradcraft.ops import movement

    if mode == "constant":
        return movement.pad(input, pad, mode, value)
    if mode not in ("reflect", "replicate", "circular"):
        raise NotImplementedError(f"Unrecognised padding mode {mode}")
    if value not in (None, 0, 0.0):
        raise ValueError_(f'Padding mode "{mode}" doesn\'t take in value argument.')
    if len(pad) % 2 or len(pad) // 2 > input.ndim - 1:
        raise ValueError_(f"Padding length should be at most 2 * (input dimensions - 1), got {len(pad)}")
    from gradcraft.ops.conv import pad_spatial

    pairs = [(int(pad[2 * i]), int(pad[2 * i + 1])) for i in range(len(pad) // 2)]
    return pad_spatial(input, list(reversed(pairs)), mode)


class _Pad(Module):
    mode = "constant"
    dims = 1

    def __init__(self, padding, value: float = 0.0) -> None:
        super().__init__()
        self.padding = tuple(padding) if isinstance(padding, (tuple, list)) else (int(padding),) * (2 * self.dims)
        if self.mode == "constant":
            self.value = value

    def forward(self, input):
        if self.mode == "constant":
            return pad(input, self.padding, "constant", self.value)
        return pad(input, self.padding, self.mode)

    def extra_repr(self) -> str:
        if type(self).__name__.startswith("ConstantPad"):
            return f"padding={self.padding}, value={self.value}"
        return f"{self.padding}"


def _pad_class(name: str, mode: str, dims: int, takes_value: bool):
    def __init__(self, padding, value: float = 0.0) -> None:
        _Pad.__init__(self, padding, value)

    def __init_without_value(self, padding) -> None:
        _Pad.__init__(self, padding)

    init = __init__ if takes_value else __init_without_value
    return type(name, (_Pad,), {"__init__": init, "mode": mode, "dims": dims})


ConstantPad1d = _pad_class("ConstantPad1d", "constant", 1, True)
ConstantPad2d = _pad_class("ConstantPad2d", "constant", 2, True)
ZeroPad1d = _pad_class("ZeroPad1d", "constant", 1, False)
ZeroPad2d = _pad_class("ZeroPad2d", "constant", 2, False)
ReflectionPad1d = _pad_class("ReflectionPad1d", "reflect", 1, False)
ReflectionPad2d = _pad_class("ReflectionPad2d", "reflect", 2, False)
ReplicationPad1d = _pad_class("ReplicationPad1d", "replicate", 1, False)
ReplicationPad2d = _pad_class("ReplicationPad2d", "replicate", 2, False)
CircularPad1d = _pad_class("CircularPad1d", "circular", 1, False)
CircularPad2d = _pad_class("CircularPad2d", "circular", 2, False)


class CosineSimilarity(Module):
    def __init__(self, dim: int = 1, eps: float = 1e-8) -> None:
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, x1, x2):
        from gradcraft.ops.losses import cosine_similarity

        return cosine_similarity(x1, x2, self.dim, self.eps)
