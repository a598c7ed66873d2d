"""Movement ops: views (reshape, permute, expand, basic slicing), cat/stack/split, pad, tril/triu.

Views share their input's buffer on every backend; their gradients are the
inverse movement (or a scatter-add for gathers).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING
from gradcraft.backend import opspec
from gradcraft.device import get_backend
from gradcraft.tensor import Tensor, node_of
from gradcraft.typing import Dims

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor

import builtins
import math

import numpy as np

from gradcraft import dtypes
from gradcraft.errors import IndexError_, RuntimeError_, UserError
from gradcraft.ops import elementwise as ew
from gradcraft.ops.function import apply, gradient
from gradcraft.ops.dims import normalize_dim


def _dims(args) -> tuple:
    """Accept f(2, 3) and f((2, 3)) alike, as PyTorch does."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        return tuple(args[0])
    return tuple(args)


# ------------------------------------------------------------------ reshape family


def _view_as_shape(op: str, x, shape: tuple):
    """The view op (reshape or expand) of x to `shape`; x itself when it has that shape already."""
    return x if shape == x.shape else apply(op, (x,), {"shape": shape}, shape, x.dtype)


def reshape(input: Tensor, *shape: int | Sequence[int]) -> Tensor:
    shape = [int(n) for n in _dims(shape)]
    if shape.count(-1) > 1:
        raise UserError(f"reshape: only one dimension can be -1, got {tuple(shape)}")
    if -1 in shape:
        known = math.prod(n for n in shape if n != -1)
        if known == 0 or input.numel() % known:
            raise RuntimeError_(f"reshape: cannot reshape a tensor of shape {input.shape} into {tuple(shape)}")
        shape[shape.index(-1)] = input.numel() // known
    shape = tuple(shape)
    if math.prod(shape) != input.numel():
        raise RuntimeError_(
            f"reshape: cannot reshape a tensor of shape {input.shape} ({input.numel()} elements) into {shape}"
        )
    return _view_as_shape(opspec.RESHAPE, input, shape)


@gradient(opspec.RESHAPE)
def _reshape_grad(node, out, g):
    return (reshape(g, node.inputs[0].shape),)


def flatten(input: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    if input.ndim == 0:
        return reshape(input, 1)
    s, e = normalize_dim(start_dim, input.ndim), normalize_dim(end_dim, input.ndim)
    return reshape(input, input.shape[:s] + (math.prod(input.shape[s : e + 1]),) + input.shape[e + 1 :])


def unflatten(x, dim: int, sizes):
    d = normalize_dim(dim, x.ndim)
    return reshape(x, x.shape[:d] + tuple(sizes) + x.shape[d + 1 :])


def squeeze(input: Tensor, dim: Dims = None) -> Tensor:
    if dim is None:
        return reshape(input, tuple(n for n in input.shape if n != 1))
    dims = {normalize_dim(d, input.ndim) for d in ((dim,) if isinstance(dim, int) else dim)}
    return reshape(input, tuple(n for i, n in enumerate(input.shape) if not (i in dims and n == 1)))


def unsqueeze(input: Tensor, dim: int) -> Tensor:
    d = normalize_dim(dim, input.ndim + 1)
    return reshape(input, input.shape[:d] + (1,) + input.shape[d:])


def permute(input: Tensor, *dims: int | Sequence[int]) -> Tensor:
    return _permute(input, _dims(dims))


def _permute(x: Tensor, dims) -> Tensor:
    ndim = len(x.shape)
    axes = tuple([normalize_dim(d, ndim) for d in dims])
    identity = tuple(range(ndim))
    if axes == identity:
        return x
    if tuple(sorted(axes)) != identity:
        raise UserError(f"permute: {tuple(dims)} is not a permutation of the {ndim} dimensions of {x.shape}")
    return apply(opspec.PERMUTE, (x,), {"axes": axes}, tuple([x.shape[a] for a in axes]), x.dtype)


@gradient(opspec.PERMUTE)
def _permute_grad(node, out, g):
    return (permute(g, tuple(np.argsort(node.attrs["axes"]).tolist())),)


def transpose(input: Tensor, dim0: int, dim1: int) -> Tensor:
    ndim = len(input.shape)
    axes = list(range(ndim))
    a, b = normalize_dim(dim0, ndim), normalize_dim(dim1, ndim)
    axes[a], axes[b] = axes[b], axes[a]
    return _permute(input, axes)


def expand(x, *sizes):
    sizes = _dims(sizes)
    if len(sizes) < x.ndim:
        raise UserError(f"expand: cannot expand shape {x.shape} to {tuple(sizes)} (fewer dimensions)")
    padded = (1,) * (len(sizes) - x.ndim) + x.shape
    shape = tuple(p if s == -1 else s for s, p in zip(sizes, padded))
    if any(p != 1 and p != s for p, s in zip(padded, shape)):
        raise RuntimeError_(f"expand: cannot expand shape {x.shape} to {tuple(sizes)}")
    return _view_as_shape(opspec.EXPAND, x, shape)


@gradient(opspec.EXPAND)
def _expand_grad(node, out, g):
    return (ew.sum_to(g, node.inputs[0].shape),)


def expand_as(x, other):
    return expand(x, other.shape)


def contiguous(x):
    return apply(opspec.CONTIGUOUS, (x,), {}, x.shape, x.dtype)


@gradient(opspec.CONTIGUOUS)
def _contiguous_grad(node, out, g):
    return (g,)


def flip(input: Tensor, *args: int | Sequence[int], dims: int | Sequence[int] | None = None) -> Tensor:
    """torch.flip(input, dims) with the dims positional, spread (x.flip(0, 1)) or as the keyword `dims`."""
    if dims is not None:
        if args:
            raise TypeError("flip() got multiple values for argument 'dims'")
        args = (dims,)
    axes = tuple(normalize_dim(d, input.ndim) for d in _dims(args))
    return apply(opspec.FLIP, (input,), {"axes": axes}, input.shape, input.dtype)


@gradient(opspec.FLIP)
def _flip_grad(node, out, g):
    return (apply(opspec.FLIP, (g,), node.attrs, g.shape, g.dtype),)


# ------------------------------------------------------------------ slicing (indexing.py: x[...] in full)


def expand_ellipsis(index: tuple, ndim: int) -> tuple:
    """The index with its Ellipsis (or the dimensions it leaves out at the end) as whole slices."""
    # (identity tests only: `==` on a Tensor index would build an op)
    consumed = builtins.sum(1 for i in index if i is not None and i is not Ellipsis)
    if consumed > ndim:
        raise IndexError_(f"too many indices for a tensor of {ndim} dimensions")
    ellipses = [k for k, i in enumerate(index) if i is Ellipsis]
    if len(ellipses) > 1:
        raise UserError("an index can only have a single ellipsis ('...')")
    if ellipses:
        at = ellipses[0]
        return index[:at] + (slice(None),) * (ndim - consumed) + index[at + 1 :]
    return index + (slice(None),) * (ndim - consumed)


def basic_slices(shape: tuple, index: tuple) -> tuple[tuple, tuple]:
    """A basic index (ints, slices with positive steps, None; Ellipsis expanded) of a tensor of
    `shape`: ((start, stop, step) per dimension, the result's shape)."""
    slices, out_shape, dim = [], [], 0
    for item in index:
        if item is None:
            out_shape.append(1)
            continue
        size = shape[dim]
        if isinstance(item, slice):
            if item.step is not None and item.step <= 0:
                raise UserError("slice step must be positive")
            start, stop, step = item.indices(size)
            slices.append((start, stop, step))
            out_shape.append(len(range(start, stop, step)))
        else:
            i = int(item)
            if not -size <= i < size:
                raise IndexError_(f"index {i} is out of bounds for dimension {dim} with size {size}")
            i %= size
            slices.append((i, i + 1, 1))
        dim += 1
    return tuple(slices), tuple(out_shape)


def basic_index(x, index: tuple):
    """`x[index]` for a basic index (ints, slices, None, Ellipsis; dimensions left out at the end are
    taken whole): a view. Integer tensors and masks: indexing.getitem."""
    slices, out_shape = basic_slices(x.shape, expand_ellipsis(index, x.ndim))
    sliced = x
    if any(s != (0, n, 1) for s, n in zip(slices, x.shape)):
        shape = tuple(len(range(*s)) for s in slices)
        sliced = apply(opspec.SLICE, (x,), {"slices": slices}, shape, x.dtype)
    return reshape(sliced, out_shape)


@gradient(opspec.SLICE)
def _slice_grad(node, out, g):
    x = node.inputs[0]
    return (put_slices([g], [node.attrs["slices"]], x.shape),)


def put_slices(grads, specs, shape):
    """Zeros of `shape` with each gradient added at its slices (one node for several slices of one tensor)."""
    return apply(opspec.PUT_SLICES, tuple(grads), {"specs": tuple(specs), "shape": tuple(shape)}, shape, grads[0].dtype)


def merge_slice_gradients(a, b):
    """a + b as one put_slices node when both are unrealized put_slices of one shape, else None.
    (Autograd sums the gradients of q, k and v sliced out of one matmul: one buffer, not three.)"""
    na, nb = node_of(a), node_of(b)
    for t, node in ((a, na), (b, nb)):
        if t.is_realized or node is None or node.op != "put_slices":
            return None
    if a.shape != b.shape or a.dtype != b.dtype or a.device != b.device:
        return None
    return put_slices(list(na.inputs) + list(nb.inputs), list(na.attrs["specs"]) + list(nb.attrs["specs"]), a.shape)


@gradient(opspec.PUT_SLICES)
def _put_slices_grad(node, out, g):
    return tuple(
        apply(opspec.SLICE, (g,), {"slices": spec}, inp.shape, g.dtype)
        for inp, spec in zip(node.inputs, node.attrs["specs"])
    )


def take_along_dim(input: Tensor, indices: Tensor, dim: int | None = None) -> Tensor:
    if dim is None:  # PyTorch: both flattened
        input, indices, dim = input.reshape(-1), indices.reshape(-1), 0
    axis = normalize_dim(dim, input.ndim)
    if indices.ndim != input.ndim:
        raise UserError(
            f"take_along_dim: indices must have {input.ndim} dimensions like the input, got {indices.shape}"
        )
    shape = tuple(
        np.broadcast_shapes(
            tuple(1 if i == axis else n for i, n in enumerate(input.shape)),
            tuple(1 if i == axis else n for i, n in enumerate(indices.shape)),
        )
    )
    shape = shape[:axis] + (indices.shape[axis],) + shape[axis + 1 :]
    indices = expand(indices.to(dtypes.int64), shape)
    src = expand(input, shape[:axis] + (input.shape[axis],) + shape[axis + 1 :])
    return apply(opspec.TAKE_ALONG_DIM, (src, indices), {"axis": axis}, shape, input.dtype)


@gradient(opspec.TAKE_ALONG_DIM)
def _take_along_dim_grad(node, out, g):
    x, indices = node.inputs
    attrs = {"axis": node.attrs["axis"], "shape": x.shape}
    return apply(opspec.SCATTER_ADD_ALONG_DIM, (g, indices), attrs, x.shape, g.dtype), None


def gather(input: Tensor, dim: int, index: Tensor, *, sparse_grad: bool = False) -> Tensor:
    """torch.gather: out[i][j] = x[i][index[i][j]] along dim (index no larger than x)."""
    if sparse_grad:
        raise UserError("gather: sparse_grad=True is not supported (there are no sparse tensors)")
    return take_along_dim(input, index, dim)


def select(input: Tensor, dim: int, index: int) -> Tensor:
    d = normalize_dim(dim, input.ndim)
    return basic_index(input, (slice(None),) * d + (index,))


def narrow(input: Tensor, dim: int, start: int, length: int) -> Tensor:
    d = normalize_dim(dim, input.ndim)
    start = int(start) + (input.shape[d] if start < 0 else 0)
    if start < 0 or length < 0 or start + length > input.shape[d]:
        raise IndexError_(
            f"narrow: [{start}, {start + length}) is out of range for dimension {dim} of size {input.shape[d]}"
        )
    return basic_index(input, (slice(None),) * d + (slice(start, start + length),))


def unbind(input: Tensor, dim: int = 0) -> tuple[Tensor, ...]:
    d = normalize_dim(dim, input.ndim)
    return tuple(select(input, d, i) for i in range(input.shape[d]))


# ------------------------------------------------------------------ joining and splitting


def cat(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    tensors = list(tensors)
    if not tensors:
        raise UserError("cat needs at least one tensor")
    first = tensors[0]
    axis = normalize_dim(dim, first.ndim)
    dtype = first.dtype
    for t in tensors[1:]:
        dtype = dtypes.promote_types(dtype, t.dtype)
        if t.ndim != first.ndim or any(a != b for i, (a, b) in enumerate(zip(t.shape, first.shape)) if i != axis):
            raise RuntimeError_(f"cat: shapes {first.shape} and {t.shape} differ outside dimension {dim}")
        if t.device != first.device:
            raise UserError(f"cat got tensors on different devices ({first.device} and {t.device})")
    tensors = [ew.cast(t, dtype) for t in tensors]
    shape = first.shape[:axis] + (builtins.sum(t.shape[axis] for t in tensors),) + first.shape[axis + 1 :]
    return apply(opspec.CAT, tuple(tensors), {"axis": axis}, shape, dtype)


@gradient(opspec.CAT)
def _cat_grad(node, out, g):
    axis, grads, start = node.attrs["axis"], [], 0
    for t in node.inputs:
        n = t.shape[axis]
        grads.append(basic_index(g, (slice(None),) * axis + (slice(start, start + n),)))
        start += n
    return tuple(grads)


def stack(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    tensors = list(tensors)
    if not tensors:
        raise UserError("stack needs at least one tensor")
    d = normalize_dim(dim, tensors[0].ndim + 1)
    return cat([unsqueeze(t, d) for t in tensors], d)


def split(tensor: Tensor, split_size_or_sections: int | list[int], dim: int = 0) -> tuple[Tensor, ...]:
    axis = normalize_dim(dim, tensor.ndim)
    size = tensor.shape[axis]
    if isinstance(split_size_or_sections, int):
        step = split_size_or_sections
        sections = [builtins.min(step, size - s) for s in range(0, size, step)] or [0]
    else:
        sections = list(split_size_or_sections)
        if builtins.sum(sections) != size:
            raise UserError(f"split: sections {sections} do not add up to dimension {dim} of size {size}")
    out, start = [], 0
    for n in sections:
        out.append(basic_index(tensor, (slice(None),) * axis + (slice(start, start + n),)))
        start += n
    return tuple(out)


def chunk(input: Tensor, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
    size = input.shape[normalize_dim(dim, input.ndim)]
    return split(input, -(-size // chunks) if size else 1, dim)


def pad(input: Tensor, pad: Sequence[int], mode: str = "constant", value: float | None = None) -> Tensor:
    """F.pad: `pad` lists (left, right) pairs starting from the last dimension (value None: 0)."""
    value = 0.0 if value is None else value
    if mode != "constant":
        raise UserError(f"pad mode {mode!r} is not supported; only 'constant'")
    if len(pad) % 2 or len(pad) // 2 > input.ndim:
        raise UserError(f"pad: {len(pad)} values do not describe (left, right) pairs for {input.ndim} dimensions")
    widths = [(0, 0)] * input.ndim
    for i in range(len(pad) // 2):
        widths[input.ndim - 1 - i] = (int(pad[2 * i]), int(pad[2 * i + 1]))
    if any(a < 0 or b < 0 for a, b in widths):
        raise UserError("pad: negative padding is not supported; slice instead")
    shape = tuple(n + a + b for n, (a, b) in zip(input.shape, widths))
    return apply(opspec.PAD, (input,), {"pads": tuple(widths), "value": value}, shape, input.dtype)


@gradient(opspec.PAD)
def _pad_grad(node, out, g):
    x = node.inputs[0]
    return (basic_index(g, tuple(slice(a, a + n) for (a, _), n in zip(node.attrs["pads"], x.shape))),)


def _triangle(op, x, diagonal):
    if x.ndim < 2:
        raise UserError(f"{op} needs a tensor with at least 2 dimensions, got shape {x.shape}")
    return apply(op, (x,), {"diagonal": diagonal}, x.shape, x.dtype)


def tril(input: Tensor, diagonal: int = 0) -> Tensor:
    return _triangle(opspec.TRIL, input, diagonal)


def triu(input: Tensor, diagonal: int = 0) -> Tensor:
    return _triangle(opspec.TRIU, input, diagonal)


@gradient(opspec.TRIL)
def _tril_grad(node, out, g):
    return (tril(g, node.attrs["diagonal"]),)


@gradient(opspec.TRIU)
def _triu_grad(node, out, g):
    return (triu(g, node.attrs["diagonal"]),)


def repeat(x, *sizes):
    sizes = _dims(sizes)
    padded = reshape(x, (1,) * (len(sizes) - x.ndim) + x.shape)
    # (a, b) repeated (r, s) = expand to (r, a, s, b), then merge pairs.
    interleaved = reshape(padded, tuple(v for n in padded.shape for v in (1, n)))
    expanded = expand(interleaved, tuple(v for r, n in zip(sizes, padded.shape) for v in (r, n)))
    return reshape(contiguous(expanded), tuple(r * n for r, n in zip(sizes, padded.shape)))


def repeat_interleave(input: Tensor, repeats: int, dim: int | None = None, *, output_size: int | None = None) -> Tensor:
    if dim is None:  # PyTorch: the flattened input
        input, dim = reshape(input, -1), 0
    d = normalize_dim(dim, input.ndim)
    if output_size is not None and output_size != input.shape[d] * repeats:
        raise RuntimeError_(f"repeat_interleave: output_size {output_size} is not {input.shape[d] * repeats}")
    y = unsqueeze(input, d + 1)
    y = expand(y, input.shape[: d + 1] + (repeats,) + input.shape[d + 1 :])
    return reshape(contiguous(y), input.shape[:d] + (input.shape[d] * repeats,) + input.shape[d + 1 :])


# ------------------------------------------------------------------ devices and in-place writes


def to_device(x, device: str):
    return apply(opspec.COPY_FROM, (x,), {"source_backend": get_backend(x.device)}, x.shape, x.dtype, device=device)


@gradient(opspec.COPY_FROM)
def _copy_from_grad(node, out, g):
    return (to_device(g, node.inputs[0].device),)


def assign(target, value):
    """Write `value` into `target`'s buffer when realized; later reads of target see the new data."""
    target.realize()
    if not isinstance(value, Tensor):
        value = ew.scalar(value, target.dtype, target.device)
    if value.device != target.device:
        raise UserError(f"assign: value is on {value.device}, target on {target.device}")
    value = ew.cast(value, target.dtype)
    if ew.broadcast_shape(target.shape, value.shape, "assign") != target.shape:
        raise UserError(f"assign: a value of shape {value.shape} does not fit a target of shape {target.shape}")
    # The write happens when the result is realized; the realizer then bumps target's version, so a
    # lazy tensor built from the old data refuses to run instead of silently reading the new data.
    return apply(opspec.ASSIGN, (target, value), {}, target.shape, target.dtype)
