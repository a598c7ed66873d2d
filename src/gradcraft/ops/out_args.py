"""PyTorch's `out=` keyword on the torch.* functions that take it.

The ops themselves return new tensors of the lazy graph; here `torch.add(a, b, out=c)` computes the result
and makes it c's contents (resized to the result's shape and cast to c's dtype, as PyTorch does), then
returns c. Ops that return (values, indices) fill a tuple of two tensors. As in PyTorch, out= refuses
inputs that require grad while grad mode is on. Tensor methods stay the bare ops (they take no out=).
"""

from __future__ import annotations

import inspect

from gradcraft.backend import opspec
from gradcraft.ops.function import is_grad_enabled
from gradcraft.tensor import Tensor

NAMES = (
    "abs add all amax amin any arange bmm cat ceil clamp clip concat cos cumsum div divide dot empty eq exp eye "
    "floor floor_divide fmod full gather ge gt index_select le lerp linspace log logical_and logical_not "
    "logical_or logspace logsumexp lt matmul max maximum min minimum mm mul multiply ne neg ones outer pow "
    "randperm remainder round rsqrt sigmoid sign sin sort sqrt square stack std sub subtract take_along_dim "
    "tanh topk tril triu trunc var where zeros concatenate"
).split()


def fill(out, result, name):
    if isinstance(result, tuple):
        if not isinstance(out, (tuple, list)) or len(out) != len(result):
            raise TypeError(f"{name}(): out= must be a tuple of {len(result)} tensors")
        for o, r in zip(out, result):
            fill(o, r, name)
        return type(result)(*out) if hasattr(result, "_fields") else tuple(out)
    if not isinstance(out, Tensor):
        raise TypeError(f"{name}(): argument 'out' must be Tensor, not {type(out).__name__}")
    if is_grad_enabled() and (result.requires_grad or out.requires_grad):
        raise RuntimeError(
            f"{name}(): functions with out=... arguments don't support automatic differentiation, "
            "but one of the arguments requires grad."
        )
    out.data = result.to(out.dtype)
    return out


def with_out(fn):
    """fn with PyTorch's keyword-only out= added (its own parameters unchanged)."""
    name = fn.__name__

    def function(*args, out=None, **kwargs):
        result = fn(*args, **kwargs)
        return result if out is None else fill(out, result, name)

    sig = inspect.signature(fn)
    params = [p for p in sig.parameters.values() if p.kind is not p.VAR_KEYWORD]
    varkw = [p for p in sig.parameters.values() if p.kind is p.VAR_KEYWORD]
    out_param = inspect.Parameter("out", inspect.Parameter.KEYWORD_ONLY, default=None, annotation="Tensor | None")
    function.__signature__ = sig.replace(parameters=params + [out_param] + varkw)
    function.__name__, function.__qualname__, function.__doc__ = name, name, fn.__doc__
    function.__module__, function.__wrapped__ = fn.__module__, fn
    return function


def install(namespace: dict) -> None:
    """Give the torch.* functions of NAMES, and those whose spec says `out=True` (backend/opspec.py), out=."""
    declared = [s.torch_function.__name__ for s in opspec.SPECS.values() if s.out]
    for name in NAMES + declared:
        if name in namespace:
            namespace[name] = with_out(namespace[name])
