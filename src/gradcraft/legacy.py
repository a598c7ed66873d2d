"""PyTorch's legacy names that old tutorials still use: the typed tensor classes
(`torch.FloatTensor([1, 2])`, `torch.LongTensor(3)`, `isinstance(x, torch.FloatTensor)`,
`x.type(torch.DoubleTensor)`, `x.type()` -> "torch.FloatTensor"). `torch.autograd.Variable` is in
gradcraft/autograd/functional.py."""

import numpy as np

from gradcraft import dtypes
from gradcraft.errors import TypeError_


class _LegacyTensorType(type):
    """The metaclass of FloatTensor & co.: calling one makes a tensor of its dtype, and isinstance
    asks a tensor's dtype (and that it is on the CPU, as PyTorch's CPU types do)."""

    def __call__(cls, *args, device=None):
        from gradcraft.ops.creation import zeros
        from gradcraft.size import Size
        from gradcraft.tensor import Tensor

        if len(args) == 1 and isinstance(args[0], Tensor):
            if args[0].dtype != cls.dtype:
                raise TypeError_(f"expected {cls.dtype} tensor, got {args[0].dtype}; convert it with .to()")
            return args[0]
        if len(args) == 1 and isinstance(args[0], Size):  # a shape, as PyTorch reads it
            args = tuple(args[0])
        if len(args) == 1 and not isinstance(args[0], int):
            data = args[0]
            if isinstance(data, (float, complex, bool)) or np.ndim(data) == 0:
                raise TypeError_(f"new(): data must be a sequence (got {type(data).__name__})")
            return Tensor(np.asarray(data).astype(cls.dtype.np), dtype=cls.dtype, device=device)
        if any(not isinstance(n, int) for n in args):
            raise TypeError_(f"{cls.__name__}() takes a sequence of data or integer sizes, got {args}")
        return zeros(*(args or (0,)), dtype=cls.dtype, device=device)  # (PyTorch leaves it uninitialized)

    def __instancecheck__(cls, obj) -> bool:
        from gradcraft.tensor import Tensor

        return isinstance(obj, Tensor) and obj.dtype == cls.dtype and obj.device == "cpu"


_TYPES = {
    "FloatTensor": dtypes.float32,
    "DoubleTensor": dtypes.float64,
    "HalfTensor": dtypes.float16,
    "BFloat16Tensor": dtypes.bfloat16,
    "LongTensor": dtypes.int64,
    "IntTensor": dtypes.int32,
    "ByteTensor": dtypes.uint8,
    "BoolTensor": dtypes.bool_,
}
LEGACY_TYPES = {name: _LegacyTensorType(name, (), {"dtype": dtype}) for name, dtype in _TYPES.items()}
_NAME_OF = {dtype: name for name, dtype in _TYPES.items()}


def tensor_type(self, dtype=None, non_blocking: bool = False, **kwargs):
    """`x.type()`: the legacy type's name ("torch.FloatTensor"); `x.type(t)`: x as dtype t, given as
    a dtype, a legacy type class or its name."""
    if dtype is None:
        return f"torch.{'cuda.' if self.device != 'cpu' else ''}{_NAME_OF[self.dtype]}"
    if isinstance(dtype, _LegacyTensorType):
        dtype = dtype.dtype
    elif isinstance(dtype, str) and dtype.removeprefix("torch.") in _TYPES:
        dtype = _TYPES[dtype.removeprefix("torch.")]
    return self.to(dtype)


def set_default_tensor_type(t: type | str) -> None:
    """The legacy way to set the default dtype (and device): `torch.set_default_tensor_type(torch.DoubleTensor)`
    or its name, `"torch.cuda.FloatTensor"` for float32 on the GPU."""
    from gradcraft.device import set_default_device

    name = t if isinstance(t, str) else getattr(t, "__name__", "")
    plain = name.removeprefix("torch.").removeprefix("cuda.")
    if plain not in _TYPES or not _TYPES[plain].is_floating_point:
        raise TypeError_(f"invalid type: {t!r}; only floating-point types are supported as the default type")
    dtypes.set_default_dtype(_TYPES[plain])
    set_default_device("cuda" if name.removeprefix("torch.").startswith("cuda.") else "cpu")


def attach(tensor_class: type) -> None:
    tensor_class.type = tensor_type
