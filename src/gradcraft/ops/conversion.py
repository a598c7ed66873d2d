"""Tensor methods that convert a tensor or make new ones like it: `.to`, `.type`, `.type_as`,
`.assign` and `new_zeros` & co. (attached to Tensor by ops/methods.py, as every op method is)."""

from gradcraft.device import canonical
from gradcraft.dtypes import to_dtype
from gradcraft.ops import movement as mv
from gradcraft.ops.creation import full
from gradcraft.ops.elementwise import cast
from gradcraft.tensor import Tensor


def to(self, *args, dtype=None, device=None) -> Tensor:
    """`.to(device)`, `.to(dtype)` or both, as in PyTorch."""
    for arg in args:
        if isinstance(arg, str) and arg.split(":")[0] in ("cpu", "cuda"):
            device = arg
        else:
            dtype = arg
    out = self
    if device is not None and canonical(device) != self.device:
        out = mv.to_device(out, canonical(device))
    if dtype is not None and to_dtype(dtype) != out.dtype:
        out = cast(out, to_dtype(dtype))
    return out


def type(self, dtype) -> Tensor:  # noqa: A001 (PyTorch's name)
    return self.to(dtype)


def type_as(self, other) -> Tensor:
    return self.to(other.dtype)


def assign(self, value) -> Tensor:
    """Overwrite this realized tensor's buffer with `value` (lazily; used by optimizers)."""
    return mv.assign(self, value)


def _new_full(self, size, fill_value, dtype, device, requires_grad) -> Tensor:
    size = size[0] if len(size) == 1 and isinstance(size[0], (tuple, list)) else size
    return full(
        tuple(size), fill_value, dtype=dtype or self.dtype, device=device or self.device, requires_grad=requires_grad
    )


def new_zeros(self, *size, dtype=None, device=None, requires_grad=False) -> Tensor:
    return _new_full(self, size, 0, dtype, device, requires_grad)


def new_ones(self, *size, dtype=None, device=None, requires_grad=False) -> Tensor:
    return _new_full(self, size, 1, dtype, device, requires_grad)


def new_empty(self, *size, dtype=None, device=None, requires_grad=False) -> Tensor:
    return _new_full(self, size, 0, dtype, device, requires_grad)


def new_full(self, size, fill_value, *, dtype=None, device=None, requires_grad=False) -> Tensor:
    return _new_full(self, (size,), fill_value, dtype, device, requires_grad)


def new_tensor(self, data, *, dtype=None, device=None, requires_grad=False) -> Tensor:
    return Tensor(data, dtype=dtype or self.dtype, device=device or self.device, requires_grad=requires_grad)


METHODS = {f.__name__: f for f in (to, type, type_as, assign, new_zeros, new_ones, new_empty, new_full, new_tensor)}
