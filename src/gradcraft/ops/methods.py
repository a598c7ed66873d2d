"""Tensor's op methods: which op each method (`x.add`, `x.sum`, `x[...]`, `x + y`, ...) calls.

gradcraft/tensor.py holds the Tensor class itself; this table gives it the methods that are thin
calls into the ops (each op lives in its gradcraft.ops module), attached once when gradcraft is
imported; an op whose spec says `method=True` (backend/opspec.py) is attached from its spec.
scripts/gen_tensor_stub.py writes them into gradcraft/tensor.pyi for editors and type checkers.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from gradcraft.backend import opspec
from gradcraft.errors import UserError
from gradcraft.ops import elementwise as ew, matmul as mm, movement as mv, nn as fn, reduce as rd
from gradcraft.ops import indexing as ix, inplace as ip, linalg as la, rounding as rn
from gradcraft.ops import conversion as cv, index_build as ib, scatter as sc
from gradcraft.ops import trig as tg  # (registers its specs' functions: attached below)

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor


def _t(x: Tensor) -> Tensor:
    """Tensor.t(): the transpose of a tensor of at most 2 dimensions."""
    if x.ndim > 2:
        raise UserError(f"t() expects a tensor with <= 2 dimensions, got shape {x.shape}; use transpose(a, b)")
    return x.transpose(0, 1) if x.ndim == 2 else x


def _reflected(op):
    """The reflected operator of op: `2 - x` calls x.__rsub__(2), which is sub(2, x)."""
    return lambda a, b: op(b, a)


def _div(self: Tensor, other, *, rounding_mode: str | None = None) -> Tensor:
    """Tensor.div / Tensor.divide (torch's names: `other`, rounding_mode None, "trunc" or "floor")."""
    return rn.div_rounded(self, other, rounding_mode=rounding_mode)


def _grad_fn(self: Tensor):
    """Tensor.grad_fn: the node that made the tensor, as PyTorch shows it (ops/grad_fn.py)."""
    from gradcraft.ops.grad_fn import grad_fn

    return grad_fn(self)


def _inplace_unary(op):
    def method(self: Tensor) -> Tensor:
        return ip._inplace(self, lambda: op(self))

    method.__name__ = method.__qualname__ = op.__name__ + "_"
    return method


def _inplace_binary(op):
    def method(self: Tensor, other: Tensor) -> Tensor:
        return ip._inplace(self, lambda: op(self, other))

    method.__name__ = method.__qualname__ = op.__name__ + "_"
    return method


def attach(tensor_class: type) -> None:
    """Give the Tensor class its op methods."""
    methods = {
        # elementwise
        "neg": ew.neg,
        "exp": ew.exp,
        "log": ew.log,
        "sqrt": ew.sqrt,
        "rsqrt": ew.rsqrt,
        "abs": ew.abs,
        "sin": ew.sin,
        "cos": ew.cos,
        "tanh": ew.tanh,
        "sigmoid": ew.sigmoid,
        "relu": ew.relu,
        "silu": ew.silu,
        "sign": ew.sign,
        "logical_not": ew.logical_not,
        "square": ew.square,
        "reciprocal": ew.reciprocal,
        "add": ew.add,
        "sub": ew.sub,
        "mul": ew.mul,
        "pow": ew.pow,
        "maximum": ew.maximum,
        "minimum": ew.minimum,
        "eq": ew.eq,
        "ne": ew.ne,
        "lt": ew.lt,
        "le": ew.le,
        "gt": ew.gt,
        "ge": ew.ge,
        "clamp": ew.clamp,
        "clip": ew.clamp,
        "masked_fill": ew.masked_fill,
        "where": lambda self, condition, other: ew.where(condition, self, other),
        "lerp": ew.lerp,
        "__neg__": ew.neg,
        "__abs__": ew.abs,
        "__invert__": ew.logical_not,
        "__add__": ew.add,
        "__radd__": _reflected(ew.add),
        "__sub__": ew.sub,
        "__rsub__": _reflected(ew.sub),
        "__mul__": ew.mul,
        "__rmul__": _reflected(ew.mul),
        "__truediv__": ew.div,
        "__rtruediv__": _reflected(ew.div),
        "__pow__": ew.pow,
        "__rpow__": _reflected(ew.pow),
        "__eq__": ew.eq,
        "__ne__": ew.ne,
        "__lt__": ew.lt,
        "__le__": ew.le,
        "__gt__": ew.gt,
        "__ge__": ew.ge,
        "__and__": ew.logical_and,
        "__or__": ew.logical_or,
        "logical_and": ew.logical_and,
        "logical_or": ew.logical_or,
        # reductions
        "sum": rd.sum,
        "mean": rd.mean,
        "max": rd.max,
        "min": rd.min,
        "amax": rd.amax,
        "amin": rd.amin,
        "var": rd.var,
        "std": rd.std,
        "logsumexp": rd.logsumexp,
        "argmax": rd.argmax,
        "argmin": rd.argmin,
        "cumsum": rd.cumsum,
        "topk": rd.topk,
        "all": rd.all,
        "any": rd.any,
        # matmul
        "matmul": mm.matmul,
        "__matmul__": mm.matmul,
        "__rmatmul__": _reflected(mm.matmul),
        # movement
        "reshape": mv.reshape,
        "view": mv.reshape,
        "flatten": mv.flatten,
        "unflatten": mv.unflatten,
        "permute": mv.permute,
        "transpose": mv.transpose,
        "expand": mv.expand,
        "expand_as": mv.expand_as,
        "squeeze": mv.squeeze,
        "unsqueeze": mv.unsqueeze,
        "__getitem__": ix.getitem,
        "split": lambda self, split_size, dim=0: mv.split(self, split_size, dim),  # PyTorch's names
        "chunk": mv.chunk,
        "flip": mv.flip,
        "contiguous": mv.contiguous,
        "gather": mv.gather,
        "take_along_dim": mv.take_along_dim,
        "tril": mv.tril,
        "triu": mv.triu,
        "repeat": mv.repeat,
        "repeat_interleave": mv.repeat_interleave,
        "clone": mv.contiguous,
        "index_select": ix.index_select,
        "select": mv.select,
        "narrow": mv.narrow,
        "unbind": mv.unbind,
        "sort": rd.sort,
        "argsort": rd.argsort,
        "prod": rd.prod,
        "norm": la.norm,
        "bmm": la.bmm,
        "mm": la.mm,
        "dot": la.dot,
        "outer": la.outer,
        "t": _t,
        "swapaxes": lambda self, axis0, axis1: mv.transpose(self, axis0, axis1),  # PyTorch's names
        "swapdims": mv.transpose,
        "masked_select": lambda self, mask: self[mask],
        "clamp_min": lambda self, min: ew.clamp(self, min=min),
        "clamp_max": lambda self, max: ew.clamp(self, max=max),
        "log1p": lambda self: ew.log(ew.add(self, 1.0)),
        "expm1": lambda self: ew.sub(ew.exp(self), 1.0),
        "log2": lambda self: ew.div(ew.log(self), math.log(2.0)),
        "log10": lambda self: ew.div(ew.log(self), math.log(10.0)),
        # rounding and number tests
        "floor": rn.floor,
        "ceil": rn.ceil,
        "trunc": rn.trunc,
        "round": rn.round,
        "floor_divide": rn.floor_divide,
        "remainder": rn.remainder,
        "fmod": rn.fmod,
        "isnan": rn.isnan,
        "isinf": rn.isinf,
        "isfinite": rn.isfinite,
        "isclose": rn.isclose,
        "allclose": rd.allclose,
        "equal": rd.equal,
        "div": _div,
        "divide": _div,
        "__floordiv__": rn.floor_divide,
        "__rfloordiv__": _reflected(rn.floor_divide),
        "__mod__": rn.remainder,
        "__rmod__": _reflected(rn.remainder),
        # in place (PyTorch's semantics: gradcraft/ops/inplace.py)
        "add_": ip.add_,
        "sub_": ip.sub_,
        "mul_": ip.mul_,
        "div_": ip.div_,
        "pow_": ip.pow_,
        "zero_": ip.zero_,
        "fill_": ip.fill_,
        "copy_": ip.copy_,
        "clamp_": ip.clamp_,
        "clip_": ip.clamp_,
        "masked_fill_": ip.masked_fill_,
        "relu_": ip.relu_,
        "neg_": ip.neg_,
        "exp_": ip.exp_,
        "sqrt_": ip.sqrt_,
        "lerp_": ip.lerp_,
        "addcmul_": ip.addcmul_,
        "addcdiv_": ip.addcdiv_,
        "uniform_": ip.uniform_,
        "normal_": ip.normal_,
        "__setitem__": ix.setitem,
        "__iadd__": ip.add_,
        "__isub__": ip.sub_,
        "__imul__": ip.mul_,
        "__itruediv__": ip.div_,
        "__ipow__": ip.pow_,
        "__ifloordiv__": lambda self, other: ip.div_(self, other, rounding_mode="floor"),
        "__imod__": lambda self, other: ip._inplace(self, lambda: rn.remainder(self, other)),
        # fused nn
        "softmax": fn.softmax,
        "log_softmax": fn.log_softmax,
        # coordinates and counts (host-side: the result's shape depends on the data)
        "nonzero": ib.nonzero,
        "argwhere": ib.argwhere,
        "bincount": ib.bincount,
        # scatter / index_add and their in-place forms
        "scatter": sc.scatter,
        "scatter_": sc.scatter_,
        "scatter_add": sc.scatter_add,
        "scatter_add_": sc.scatter_add_,
        "index_add": sc.index_add,
        "index_add_": sc.index_add_,
    }
    # the ops whose spec makes them Tensor methods too (backend/opspec.py: method=True)
    methods.update({s.torch_function.__name__: s.torch_function for s in opspec.SPECS.values() if s.method})
    methods.update(cv.METHODS)
    # the inverse trigonometric and hyperbolic functions' aliases (arcsin, ...) and in-place forms
    methods.update(tg.ALIASES)
    for name, op in {**tg.UNARY, **tg.ALIASES}.items():
        methods[name + "_"] = _inplace_binary(op) if op in tg.BINARY.values() else _inplace_unary(op)
    for name, op in tg.BINARY.items():
        methods[name + "_"] = _inplace_binary(op)
    for name, function in methods.items():
        setattr(tensor_class, name, function)
    tensor_class.T = property(lambda self: mv.permute(self, *reversed(range(self.ndim))))
    tensor_class.mT = property(lambda self: mv.transpose(self, -2, -1))
    tensor_class.grad_fn = property(_grad_fn)
