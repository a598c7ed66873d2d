"""In-place operations with PyTorch's semantics, on top of `assign` and the version counter.

Every in-place op computes its new value as ordinary (lazy) Tensor ops, then makes it the tensor's
contents in one of two ways:

- Nothing to differentiate (under `no_grad`, or no tensor involved requires grad): the value is
  written into the tensor's buffer now (`assign`, realized). Memory shared with the tensor sees the
  write, as in PyTorch: a view (`x[0].fill_(0)`, `x[:, 1] = 5`, `p.data.add_(...)`) writes into its
  base. Just before any write (this one, or an optimizer's), lazy ops built from the old contents
  are re-pointed at a copy of them (`keep_readers_on_old_data`), so they compute what PyTorch's
  eager ops computed. A lazy view of a tensor that does not require grad is the exception: it
  aliases the tensor and reads the new data. For a tensor that requires grad (a parameter updated
  under `no_grad` or by an optimizer) the copy is a constant, and a backward pass through such an
  op raises PyTorch's "modified by an inplace operation" error.
- Recorded for autograd (a non-leaf that requires grad, or a value that does): the tensor object
  becomes the new lazy node, whose input is its old self, so gradients flow through the old graph.
  Ops built from the tensor before the write are re-pointed at the old self. If one of them needs
  the old value for its own gradient, `backward()` through it raises PyTorch's error. A write to a
  lazy view lands in its base, and every live view of the base is rebuilt on the new base (they
  share one version, as in PyTorch's views).

Refused as in PyTorch: a leaf that requires grad (or a view of one) outside `no_grad`; a result
whose dtype the tensor cannot hold (`int_tensor += 0.5`); writing into an expanded tensor.
"""

import builtins
import weakref

import numpy as np

from gradcraft import dtypes
from gradcraft.device import get_backend
from gradcraft.engine.lazy import current_reads
from gradcraft.engine.realize import BEFORE_WRITE
from gradcraft.errors import RuntimeError_, UserError
from gradcraft.ops import elementwise as ew
from gradcraft.ops import movement as mv
from gradcraft.ops import rounding
from gradcraft.ops.creation import arange, next_seed
from gradcraft.ops.function import (
    VIEW_OPS,
    apply,
    is_grad_enabled,
    live_readers,
    no_grad,
    refuses_stale_readers,
    register_reader,
    storage_readers,
    view_output,
)
from gradcraft.tensor import Tensor, buffer_of, bump_version, from_buffer, node_of, same_memory, take_contents, version


# Gradient rules that do not read the value of an input (only its shape, or their output): an op of
# another kind built from a tensor that is later modified in place has lost what its backward needs.
_GRADIENT_NEEDS_NO_INPUT = frozenset(
    {
        "add",
        "sub",
        "neg",
        "cast",
        "reshape",
        "permute",
        "expand",
        "slice",
        "contiguous",
        "flip",
        "cat",
        "pad",
        "tril",
        "triu",
        "sum",
        "cumsum",
        "copy_from",
        "put_slices",
        "index_put_add",
        "sign",
        "exp",
        "sqrt",
        "rsqrt",
        "tanh",
        "sigmoid",
        "relu",
        "softmax",
        "log_softmax",
        "index",
        "take_along_dim",
        "embedding",
        "where",  # (read only their integer or boolean inputs)
        "passthrough",  # (a custom Function's backward reads what its ctx saved: autograd/function.py)
    }
)
# Rules that read their own output (PyTorch saves it): writing into that output breaks them.
_GRADIENT_READS_OUTPUT = frozenset(
    {"exp", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "softmax", "log_softmax", "div", "pow"}
)
# Rules that read an input only for the other operand's gradient.
_GRADIENT_OF_OTHERS = frozenset({"mul", "matmul", "maximum", "minimum"})

# Nodes whose backward would read a tensor that was modified in place after they were built:
# id(node) -> weak reference (removed when the node goes).
_MODIFIED_SAVED: dict = {}


def _mark_modified(node) -> None:
    key = id(node)
    _MODIFIED_SAVED[key] = weakref.ref(node, lambda _, key=key: _MODIFIED_SAVED.pop(key, None))


def lost_saved_value(node) -> bool:
    """Did an in-place write overwrite a value node's gradient rule reads? (autograd asks)"""
    ref = _MODIFIED_SAVED.get(id(node)) if _MODIFIED_SAVED else None
    return ref is not None and ref() is node


def _writable_dtype(x, value) -> None:
    if not dtypes.promote_types(x.dtype, value.dtype) == x.dtype and not (
        x.dtype.is_floating_point and value.dtype.is_floating_point
    ):
        raise RuntimeError_(
            f"result type {value.dtype.name} can't be cast to the desired output type "
            f"{x.dtype.name} of an in-place operation; convert the tensor first (e.g. .float())"
        )


def _view_base(x):
    """The tensor a chain of lazy views starts from (x itself when x is not a lazy view)."""
    t = x
    while not t.is_realized and node_of(t) is not None and node_of(t).op in VIEW_OPS:
        t = node_of(t).inputs[0]
    return t


def _check_allowed(x, recording: bool) -> None:
    if recording and node_of(x) is None and x.requires_grad:
        raise RuntimeError_(
            "a leaf tensor that requires grad is being used in an in-place operation; "
            "do it under `with gradcraft.no_grad():` (or on .detach())"
        )
    t, expanded = x, False
    while not t.is_realized and node_of(t) is not None and node_of(t).op in VIEW_OPS:
        node = node_of(t)
        expanded = expanded or (node.op == "expand" and t.numel() != node.inputs[0].numel())
        t = node.inputs[0]
    if expanded:
        raise RuntimeError_(
            "unsupported operation: more than one element of the written-to tensor refers to a "
            "single memory location; call .clone() before writing"
        )
    if recording and t is not x and node_of(t) is None and t.requires_grad:
        raise RuntimeError_(
            "a view of a leaf tensor that requires grad is being used in an in-place operation; "
            "do it under `with gradcraft.no_grad():`"
        )


class _Before:
    """x's view base, and what read x before an in-place op started building its value: only those
    readers can have lost a value their gradient needs (the value's own ops read the old x on purpose)."""

    def __init__(self, x):
        self.base = _view_base(x)
        self.readers = live_readers(x)


def write(x, value, before: _Before | None = None):
    """Make `value` (a tensor or a Python number, broadcast to x's shape) the contents of x; returns x."""
    before = before or _Before(x)
    if not isinstance(value, Tensor):
        value = ew.scalar(value, x.dtype, x.device)
    if value.device != x.device:
        raise UserError(
            f"in-place operation: value is on {value.device}, the tensor on {x.device}; move one with .to()"
        )
    _writable_dtype(x, value)
    if ew.broadcast_shape(x.shape, value.shape, "in-place operation") != x.shape:
        raise RuntimeError_(
            f"output with shape {list(x.shape)} doesn't match the broadcast shape "
            f"{list(ew.broadcast_shape(x.shape, value.shape))} of an in-place operation"
        )
    recording = is_grad_enabled() and (x.requires_grad or value.requires_grad)
    _check_allowed(x, recording)
    value = ew.cast(value, x.dtype)
    if recording and before.base is not x:
        _write_through_view(x, value if value.shape == x.shape else mv.expand(value, x.shape), before)
    elif recording:
        _rebind_with_views(x, value if value.shape == x.shape else mv.expand(value, x.shape), x, before)
    else:
        _write_buffer(x, value, before)
    return x


def _inplace(x, compute):
    """An in-place op: `compute()` builds the new value from x's current contents."""
    before = _Before(x)
    return write(x, compute(), before)


def _write_through_view(x, value, before: _Before) -> None:
    """A recorded write to a lazy view lands in its base, as in PyTorch (where they share memory): the
    base becomes itself with the view's elements replaced (a differentiable index_put at the positions
    the view chain picks), and every live view of the base, x included, becomes the same view of the
    new base. They share one version, as in PyTorch: an op that saved any of them for its gradient
    (before the write) raises at backward."""
    base, chain, t = before.base, [], x
    while t is not base:
        chain.append((node_of(t).op, node_of(t).attrs, t.shape))
        t = node_of(t).inputs[0]
    if base.ndim == 0:  # (a view of a number: the value is the new base)
        _rebind_with_views(base, value.reshape(()), x, before)
        return
    put = {"spec": tuple(range(base.ndim)), "shape": base.shape}
    with no_grad():
        positions = arange(base.numel(), dtype=dtypes.int64, device=base.device).reshape(base.shape)
        for op, attrs, shape in reversed(chain):
            positions = apply(op, (positions,), attrs, shape, dtypes.int64)
        index, stride = [], base.numel()
        for n in base.shape:  # the flat positions as one index per dimension of the base
            stride //= n
            index.append(rounding.remainder(rounding.floor_divide(positions, stride), n) if n else positions)
        hit = apply("index_put_add", (ew.cast(ew.ge(positions, 0), base.dtype), *index), put, base.shape, base.dtype)
    # value at the positions (each once: a view of an expanded tensor is refused), the base elsewhere;
    # base-shaped, not a reshape of a flat write, which would make the base look like a view
    placed = apply("index_put_add", (value, *index), put, base.shape, base.dtype)
    _rebind_with_views(base, ew.where(ew.ne(hit, 0), placed, base), x, before)


def _rebind_with_views(base, value, x, before: _Before) -> None:
    """base becomes `value`; every live lazy view of base (views of views too) becomes the same view of
    the new base, as in PyTorch where they share memory and one version counter. x is the tensor the
    write named (base or one of its views), `before` its readers before the write."""
    views, i = [], 0  # (view, its parent, its node, readers before), parents first
    parents = [base]
    while i < len(parents):
        for node in live_readers(parents[i]):
            view = view_output(node) if node.op in VIEW_OPS else None
            if view is not None:
                views.append((view, parents[i], node, before if view is x else _Before(view)))
                parents.append(view)
        i += 1
    _rebind(base, value, before if base is x else _Before(base))
    for view, parent, node, view_before in views:
        _rebind(view, apply(node.op, (parent,), node.attrs, view.shape, view.dtype), view_before)
        node_of(view).view_out = weakref.ref(view)  # (the node's output is now the view object itself)


def _rebind(x, value, before: _Before) -> None:
    """x becomes the lazy node computing `value`; what read x before reads its old self."""
    _mark_if_output_saved(x)
    earlier = {id(n) for n in before.readers}
    readers = live_readers(x)
    old = take_contents(x, value)  # (the old contents' node or buffer, memory, version and readers)
    for node in readers:
        _repoint(node, x, old)
        if id(node) in earlier and _needs_value(node, old):
            _mark_modified(node)


def _mark_if_output_saved(x) -> None:
    """x is about to change: if the op that computed x reads x for its gradient, that gradient is lost."""
    node = node_of(x)
    if node is None or not x.requires_grad or node.op not in _GRADIENT_READS_OUTPUT:
        return
    if node.op in ("div", "pow") and not node.inputs[1].requires_grad:
        return  # (their output is read only for the second operand's gradient)
    _mark_modified(node)


def _repoint(node, source, target) -> None:
    inputs, versions = list(node.inputs), list(node.input_versions)
    for i, inp in enumerate(inputs):
        if inp is source:
            inputs[i], versions[i] = target, version(target)
    node.inputs, node.input_versions = tuple(inputs), tuple(versions)


def _needs_value(node, x) -> bool:
    """Would node's gradient rule read x's value (PyTorch: is x saved for backward)?"""
    if node.op in _GRADIENT_NEEDS_NO_INPUT or not builtins.any(t.requires_grad for t in node.inputs):
        return False
    if node.op == "div" and node.inputs[0] is x and node.inputs[1] is not x:
        return node.inputs[1].requires_grad  # a / b reads a only for b's gradient (b's for a's, out for b's)
    if node.op in _GRADIENT_OF_OTHERS:  # x is read only for the other operand's gradient
        return builtins.sum(1 for t in node.inputs if t is x) > 1 or builtins.any(
            t.requires_grad for t in node.inputs if t is not x
        )
    return True


def _write_buffer(x, value, before: _Before) -> None:
    """Write value into x's memory now (through a view into its base)."""
    base = before.base
    _mark_if_output_saved(base)
    base.realize()
    with no_grad():
        value = value.realize()  # read the old contents before anything is written
        x.realize()  # (a lazy view: of base's buffer)
        if base is not x:
            keep_readers_on_old_data(base)
        mv.assign(x, value).realize()  # (the engine calls keep_readers_on_old_data(x) before the write)
    if base is not x and not same_memory(base, x):  # (x's buffer is no view of base's memory)
        bump_version(base)


def keep_readers_on_old_data(t, scheduled=frozenset()) -> None:
    """Just before t's memory is overwritten: every lazy op built from t's current contents (and not
    part of the schedule doing the write) is re-pointed at a copy of them, so it computes what it
    would have computed before the write, as in PyTorch where it ran eagerly. A lazy view of a tensor
    that does not require grad is the exception: it aliases t, so it reads the new data.

    For t that requires grad (a parameter updated by an optimizer or under no_grad), the copy is a
    constant: a backward pass through such an op would not reach t, so it raises PyTorch's
    "modified by an inplace operation" error instead."""
    if refuses_stale_readers(t):
        return
    copies: dict = {}  # id(alias) -> a copy of its contents
    for node in storage_readers(t):
        if id(node) in scheduled:
            continue
        # the inputs on this memory (t, or another alias of it: a detached copy, a view), at its current version
        at = current_reads(node, t)
        if not at:
            continue
        for alias in {id(node.inputs[i]): node.inputs[i] for i in at}.values():
            if node.op in VIEW_OPS and not alias.requires_grad:
                view = view_output(node)
                if view is not None:
                    _keep_computations_through_view(view, scheduled)
                node.input_versions = tuple(
                    version(t) + 1 if inp is alias and i in at else v
                    for i, (inp, v) in enumerate(zip(node.inputs, node.input_versions))
                )
                continue
            if _differentiable(node) and (alias.requires_grad or _needs_value(node, alias)):
                _mark_modified(node)  # (a constant's new data: PyTorch refuses a gradient that saved the old)
            copy = copies.get(id(alias))
            if copy is None:
                copy = copies[id(alias)] = _copy_of(alias)
            _repoint(node, alias, copy)
            register_reader(node, (copy,))


def _keep_computations_through_view(view, scheduled) -> None:
    """A lazy view of the tensor being written aliases it, but an op built on the view before the
    write (x[:2] * 2) must compute from the old contents: it gets a copy of the view's contents now."""
    copy = None
    for node in live_readers(view):
        if id(node) in scheduled:
            continue
        if node.op in VIEW_OPS:
            inner = view_output(node)
            if inner is not None:
                _keep_computations_through_view(inner, scheduled)
            continue
        if copy is None:
            with no_grad():
                copy = mv.contiguous(view.detach()).realize()  # (the write has not run yet)
        _repoint(node, view, copy)
        register_reader(node, (copy,))


def _differentiable(node) -> bool:
    """Was node built to be differentiated (some input required grad)?"""
    return builtins.any(inp.requires_grad for inp in node.inputs)


def _copy_of(t):
    """A constant tensor holding a copy of t's buffer now (no schedule: this runs inside one)."""
    return from_buffer(get_backend(t.device).run("contiguous", [buffer_of(t)], {}), t.dtype, t.device)


def _install_hook() -> None:
    if keep_readers_on_old_data not in BEFORE_WRITE:
        BEFORE_WRITE.append(keep_readers_on_old_data)


_install_hook()


# ------------------------------------------------------------------ the `_` methods


def add_(x, other, *, alpha=1):
    return _inplace(x, lambda: ew.add(x, other, alpha=alpha))


def sub_(x, other, *, alpha=1):
    return _inplace(x, lambda: ew.sub(x, other, alpha=alpha))


def mul_(x, other):
    return _inplace(x, lambda: ew.mul(x, other))


def div_(x, other, *, rounding_mode=None):
    return _inplace(x, lambda: rounding.div_rounded(x, other, rounding_mode=rounding_mode))


def pow_(x, exponent):
    return _inplace(x, lambda: ew.pow(x, exponent))


def zero_(x):
    return write(x, 0)


def fill_(x, value):
    return write(x, value)


def copy_(x, src, non_blocking: bool = False):
    if not isinstance(src, Tensor):
        src = Tensor(np.asarray(src), device=x.device)
    if src.device != x.device:
        src = src.to(x.device)
    # copy_ converts any dtype, unlike arithmetic in place
    return write(x, ew.cast(src, x.dtype))


def clamp_(x, min=None, max=None):
    return _inplace(x, lambda: ew.clamp(x, min, max))


def masked_fill_(x, mask, value):
    return _inplace(x, lambda: ew.masked_fill(x, mask, value))


def relu_(x):
    return _inplace(x, lambda: ew.relu(x))


def neg_(x):
    return _inplace(x, lambda: ew.neg(x))


def exp_(x):
    return _inplace(x, lambda: ew.exp(x))


def sqrt_(x):
    return _inplace(x, lambda: ew.sqrt(x))


def lerp_(x, end, weight):
    return _inplace(x, lambda: ew.lerp(x, end, weight))


def addcmul_(x, tensor1, tensor2, *, value=1):
    return _inplace(x, lambda: ew.add(x, ew.mul(ew.mul(tensor1, tensor2), value)))


def addcdiv_(x, tensor1, tensor2, *, value=1):
    return _inplace(x, lambda: ew.add(x, ew.mul(ew.div(tensor1, tensor2), value)))


def uniform_(x, a: float = 0.0, b: float = 1.0, *, generator=None):
    seed = next_seed(generator)
    rand = apply("rand", (), {"shape": x.shape, "seed": seed, "dtype": x.dtype.np}, x.shape, x.dtype, device=x.device)
    return write(x, ew.add(ew.mul(rand, b - a), a))


def normal_(x, mean: float = 0.0, std: float = 1.0, *, generator=None):
    seed = next_seed(generator)
    randn = apply("randn", (), {"shape": x.shape, "seed": seed, "dtype": x.dtype.np}, x.shape, x.dtype, device=x.device)
    return write(x, ew.add(ew.mul(randn, std), mean))
