"""gradcraft: a from-scratch deep-learning engine and LLM toolkit.

    import gradcraft as gc
    x = gc.randn(4, 3, requires_grad=True)
    loss = (x.tanh() ** 2).sum()      # lazy: nothing has run yet
    loss.backward()                   # one schedule: forward + backward
    print(loss.item(), x.grad)

Names follow PyTorch. Tensors are lazy: ops build a graph, and `.realize()`
(or anything that needs data) runs it.
"""

from __future__ import annotations

import os as _os
import sys as _sys
import types as _types

# OpenBLAS's idle threads spin for ~0.1 s after every product, on the cores that the CPU backend's
# own threads (attention, row-wise kernels) need next: a training step's attention ran 1.5x slower
# beside them. With a timeout of 2^4 cycles they sleep at once. Read when NumPy loads OpenBLAS, so
# it takes effect when gradcraft is imported before NumPy (the CLI, bench/); a value set by the
# user wins.
_os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

from gradcraft.dtypes import DType, bfloat16, bool_, float16, float32, float64, int32, int64, promote_types, uint8
from gradcraft.tensor import Tensor
from gradcraft.ops.methods import attach as _attach_methods  # noqa: E402
from gradcraft.autograd import functional as _autograd_functional  # noqa: E402,F401  (Tensor.backward, hooks)

_attach_methods(Tensor)

from gradcraft.device import is_available  # noqa: E402
from gradcraft.backend.memory import stats as _memory_stats  # noqa: E402
from gradcraft.errors import UserError  # noqa: E402
from gradcraft.ops.creation import (
    arange,
    as_tensor,
    empty,
    empty_like,
    eye,
    from_numpy,
    full,  # noqa: E402
    full_like,
    get_rng_state,
    linspace,
    logspace,
    manual_seed,
    ones,
    ones_like,
    rand,
    rand_like,
    randint,
    randint_like,
    randn,
    randn_like,
    randperm,
    set_rng_state,
    tensor,
    zeros,
    zeros_like,
)
from gradcraft.ops.elementwise import (
    abs,
    add,
    clamp,
    cos,
    eq,
    exp,
    ge,
    gt,
    le,
    lerp,
    log,  # noqa: E402
    logaddexp,
    logical_and,
    logical_not,
    logical_or,
    lt,
    masked_fill,
    maximum,
    minimum,
    mul,
    ne,
    neg,
    pow,
    relu,
    rsqrt,
    sigmoid,
    sign,
    sin,
    sqrt,
    square,
    sub,
    tanh,
    where,
)
from gradcraft.ops.function import enable_grad, is_grad_enabled, no_grad  # noqa: E402
from gradcraft.ops.linalg import bmm, dot, einsum, mm, norm, outer  # noqa: E402
from gradcraft.ops.indexing import index_select  # noqa: E402
from gradcraft.ops.matmul import matmul  # noqa: E402
from gradcraft.ops.movement import (
    cat,
    chunk,
    flatten,
    flip,
    gather,
    narrow,
    permute,  # noqa: E402
    repeat_interleave,
    reshape,
    select,
    split,
    squeeze,
    stack,
    take_along_dim,
    transpose,
    tril,
    triu,
    unbind,
    unsqueeze,
)
from gradcraft.ops.reduce import (
    all,
    allclose,
    amax,
    amin,
    any,
    argmax,
    argmin,
    argsort,
    cumsum,  # noqa: E402
    equal,
    logsumexp,
    max,
    mean,
    min,
    prod,
    sort,
    std,
    topk,
    var,
)
from gradcraft.ops.reduce import sum as sum  # noqa: E402
from gradcraft.ops.rounding import div_rounded as div  # noqa: E402
from gradcraft.ops.rounding import (
    ceil,
    floor,
    floor_divide,
    fmod,
    isclose,
    isfinite,  # noqa: E402
    isinf,
    isnan,
    remainder,
    round,
    trunc,
)
from gradcraft.ops.nn import softmax, log_softmax  # noqa: E402
from gradcraft.serialization import load, save  # noqa: E402

bool = bool_  # gradcraft.bool, like torch.bool
float = float32  # gradcraft.float, gradcraft.double, gradcraft.long, ... as in torch
double = float64
half = float16
long = int64
int = int32
concat = concatenate = cat
clip = clamp
divide, multiply, subtract = div, mul, sub
from gradcraft.size import Size  # noqa: E402  (a tuple that prints as torch.Size([2, 3]))


def numel(input: Tensor) -> int:
    return input.numel()


def is_tensor(obj: object) -> bool:
    return isinstance(obj, Tensor)


def memory_stats() -> dict:
    """Bytes in use by tensors, the peak since `reset_peak_memory_stats()`, and allocation counts."""
    return _memory_stats.as_dict()


def reset_peak_memory_stats() -> None:
    _memory_stats.reset_peak()


def realize(*tensors: Tensor) -> None:
    """Realize several tensors in one schedule (shared intermediates are computed once)."""
    from gradcraft.engine.realize import realize as _realize

    _realize(list(tensors))


__version__ = "0.1.0"


class _DeviceModule(_types.ModuleType):
    """gradcraft.device stays the module it is, and is also callable like torch.device:
    `gc.device("cuda")` is the canonical device string ("cuda:0"), which `.to()` takes."""

    def __call__(self, type_or_spec, index=None):
        from gradcraft.device import canonical

        return canonical(type_or_spec if index is None else f"{type_or_spec}:{index}")


_sys.modules["gradcraft.device"].__class__ = _DeviceModule

from gradcraft import cuda, nn, optim  # noqa: E402,F401  (after the Tensor methods are attached)

from gradcraft.compiled import compile  # noqa: E402  (torch.compile)

# Random generators and sampling ops (gradcraft/ops/generator.py, gradcraft/ops/random.py)
from gradcraft.ops.creation import default_generator, initial_seed, seed  # noqa: E402
from gradcraft.ops.generator import Generator  # noqa: E402
from gradcraft.ops.random import attach_methods as _attach_random_methods  # noqa: E402
from gradcraft.ops.random import bernoulli, multinomial, normal, poisson  # noqa: E402

_attach_random_methods(Tensor)
from gradcraft import utils  # noqa: E402,F401  (torch.utils.data: datasets, samplers, DataLoader)

# Defaults, constants and PyTorch's legacy names (gradcraft/legacy.py, gradcraft/accelerator.py)
import math as _math  # noqa: E402

from gradcraft import accelerator  # noqa: E402,F401
from gradcraft import autograd as _autograd  # noqa: E402
from gradcraft.device import get_default_device, set_default_device  # noqa: E402,F401
from gradcraft.dtypes import get_default_dtype, set_default_dtype  # noqa: E402,F401
from gradcraft.legacy import LEGACY_TYPES as _LEGACY_TYPES  # noqa: E402
from gradcraft.legacy import attach as _attach_legacy  # noqa: E402
from gradcraft.legacy import set_default_tensor_type  # noqa: E402,F401
from gradcraft.ops.grad_mode import inference_mode, is_inference_mode_enabled  # noqa: E402,F401

inf, nan, pi, e = _math.inf, _math.nan, _math.pi, _math.e
globals().update(_LEGACY_TYPES)  # FloatTensor, LongTensor, DoubleTensor, IntTensor, BoolTensor, ByteTensor, ...
_attach_legacy(Tensor)
from gradcraft import autograd  # noqa: E402,F401  (torch.autograd: Function, grad, backward)
from gradcraft import distributions  # noqa: E402,F401  (torch.distributions)
from gradcraft import onnx  # noqa: E402,F401  (torch.onnx: export refused with one line)
from gradcraft import multiprocessing  # noqa: E402,F401  (torch.multiprocessing: spawn)

# Mixed precision and the precision switches, under PyTorch's names (gradcraft/amp, gradcraft/backends)
from gradcraft import amp, backends  # noqa: E402,F401
from gradcraft.amp import GradScaler  # noqa: E402,F401  (torch.GradScaler)
from gradcraft.amp import cpu  # noqa: E402  (torch.cpu, with torch.cpu.amp)
from gradcraft.amp.autocast_mode import (  # noqa: E402,F401
    autocast,
    autocast_decrement_nesting,
    autocast_increment_nesting,
    clear_autocast_cache,
    get_autocast_cpu_dtype,
    get_autocast_dtype,
    get_autocast_gpu_dtype,
    is_autocast_cache_enabled,
    is_autocast_cpu_enabled,
    is_autocast_enabled,
    set_autocast_cache_enabled,
    set_autocast_dtype,
    set_autocast_enabled,
)
from gradcraft.backends import get_float32_matmul_precision, set_float32_matmul_precision  # noqa: E402,F401

_sys.modules[__name__ + ".cpu"], _sys.modules[__name__ + ".cpu.amp"] = cpu, cpu.amp


def concatenate(tensors: list[Tensor] | tuple[Tensor, ...], axis: int = 0) -> Tensor:  # noqa: F811  (PyTorch: axis)
    """torch.concatenate: cat with NumPy's axis= name."""
    return cat(tensors, axis)


from gradcraft.ops.out_args import install as _install_out  # noqa: E402

_install_out(globals())  # torch.add(..., out=t) and the other out= functions

from gradcraft.ops.index_build import argwhere, bincount, meshgrid, nonzero  # noqa: E402,F401
from gradcraft.ops.scatter import index_add, scatter, scatter_add  # noqa: E402,F401

# diagonals, sliding windows, distances (gradcraft/ops/diagonal.py, distance.py)
from gradcraft.ops.diagonal import diag, diag_embed, diagonal, trace  # noqa: E402,F401
from gradcraft.ops.out_args import with_out as _with_out  # noqa: E402
from gradcraft.ops.distance import cdist, pairwise_distance  # noqa: E402,F401
from gradcraft.ops.diagonal import unfold as _unfold  # noqa: E402

for _name, _fn in (("diag", diag), ("diag_embed", diag_embed), ("diagonal", diagonal), ("trace", trace)):
    setattr(Tensor, _name, _fn)
Tensor.unfold = _unfold
diag = _with_out(diag)  # torch.diag(..., out=)

# log1p/expm1 accurate near zero (gradcraft/ops/log1p.py); selu/celu as torch.* too
from gradcraft.ops.log1p import expm1, log1p  # noqa: E402,F401
from gradcraft.ops.activations_more import celu, selu  # noqa: E402,F401

Tensor.log1p, Tensor.expm1 = log1p, expm1
log1p, expm1 = _with_out(log1p), _with_out(expm1)  # (out=)

# roll, movedim, stacking, triangle indices, cumprod, log2/log10, addmm/baddbmm (gradcraft/ops/tensor_extras.py)
from gradcraft.ops import tensor_extras as _extras  # noqa: E402

roll, movedim, moveaxis, broadcast_to = _extras.roll, _extras.movedim, _extras.moveaxis, _extras.broadcast_to
tril_indices, triu_indices, clamp_min, clamp_max = (
    _extras.tril_indices,
    _extras.triu_indices,
    _extras.clamp_min,
    _extras.clamp_max,
)
for _name in ("roll", "movedim", "moveaxis", "broadcast_to", "masked_select", "cumprod", "log2", "log10"):
    setattr(Tensor, _name, getattr(_extras, _name))
for _name in ("addmm", "baddbmm"):
    setattr(Tensor, _name, getattr(_extras, _name))
for _name in ("hstack", "vstack", "masked_select", "cumprod", "log2", "log10", "addmm", "baddbmm"):
    globals()[_name] = _with_out(getattr(_extras, _name))  # (out=)

from gradcraft.ops.index_fill import index_fill, index_fill_ as _index_fill_  # noqa: E402

Tensor.index_fill, Tensor.index_fill_ = index_fill, _index_fill_

from gradcraft.ops.erf import erf, erfc  # noqa: E402

Tensor.erf, Tensor.erfc = erf, erfc
erf, erfc = _with_out(erf), _with_out(erfc)  # (out=)

# torch.set_num_threads & co. (gradcraft/backends/runtime_switches.py)
from gradcraft.backends.runtime_switches import (  # noqa: E402,F401
    are_deterministic_algorithms_enabled,
    get_num_threads,
    is_deterministic_algorithms_warn_only_enabled,
    set_num_threads,
    use_deterministic_algorithms,
)

_where3 = where
from gradcraft.typing import TensorOrNumber as _TensorOrNumber  # noqa: E402


def where(  # noqa: F811
    condition: Tensor,
    input: _TensorOrNumber | None = None,
    other: _TensorOrNumber | None = None,
    *,
    out: Tensor | None = None,
) -> Tensor | tuple[Tensor, ...]:
    """torch.where(condition, input, other), or torch.where(condition): nonzero(condition, as_tuple=True)."""
    if input is None and other is None:
        return nonzero(condition, as_tuple=True)
    if input is None or other is None:
        raise TypeError("where() expects both input and other, or neither")
    return _where3(condition, input, other, out=out)


from gradcraft.ops.unique import unique, unique_consecutive  # noqa: E402

Tensor.unique, Tensor.unique_consecutive = unique, unique_consecutive

from gradcraft.ops import linalg_namespace as linalg  # noqa: E402  (torch.linalg: the norms)

_sys.modules[__name__ + ".linalg"] = linalg

from gradcraft.ops.quantile import median, quantile  # noqa: E402

Tensor.median, Tensor.quantile = median, quantile
quantile = _with_out(quantile)  # (out=)

from gradcraft.printoptions import set_printoptions  # noqa: E402,F401

# inverse trigonometric / hyperbolic functions, sinh, cosh, hypot and atan2 (gradcraft/ops/trig.py)
from gradcraft.ops import trig as _trig  # noqa: E402

for _name in (*_trig.UNARY, *_trig.BINARY, *_trig.ALIASES):
    globals()[_name] = _with_out(getattr(_trig, _name))  # (out=)

# torch.inverse / det / logdet / slogdet (and Tensor methods); torch.linalg has the rest (gradcraft/ops/linalg_solve.py)
from gradcraft.ops.linalg_solve import inverse, logdet  # noqa: E402
from gradcraft.ops import linalg_solve as _linalg_solve  # noqa: E402


def det(input: Tensor) -> Tensor:
    """torch.det: torch.linalg.det."""
    return _linalg_solve.det(input)


def slogdet(input: Tensor) -> tuple:
    """torch.slogdet: torch.linalg.slogdet."""
    return _linalg_solve.slogdet(input)


Tensor.inverse, Tensor.det, Tensor.logdet, Tensor.slogdet = inverse, det, logdet, slogdet
inverse = _with_out(inverse)  # (out=)
