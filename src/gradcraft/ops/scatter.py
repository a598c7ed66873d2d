"""scatter, scatter_add and index_add (and their in-place forms), as in PyTorch.

They are built on two backend kernels: "scatter_add_along_dim" (take_along_dim's inverse, adding
repeats) and "index_put_add" (advanced indexing's inverse). Gradients are PyTorch's: scatter gives
self the gradient where nothing was written and src the gradient gathered at its positions;
scatter_add and index_add pass the gradient to self unchanged and gather it for src (times alpha).
"""

from __future__ import annotations

from typing import TYPE_CHECKING


from gradcraft import dtypes
from gradcraft.backend import opspec
from gradcraft.errors import RuntimeError_, UserError
from gradcraft.ops import elementwise as ew
from gradcraft.ops import movement as mv
from gradcraft.ops.dims import normalize_dim
from gradcraft.ops.function import apply, gradient, no_grad
from gradcraft.ops.indexing import advanced_spec
from gradcraft.ops.inplace import _inplace
from gradcraft.tensor import Tensor

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor


def _check(name: str, x: Tensor, dim: int, index: Tensor, src: Tensor | None) -> int:
    if index.dtype != dtypes.int64:
        raise RuntimeError_(f"{name}(): Expected dtype int64 for index")
    if src is not None and src.dtype != x.dtype:
        raise RuntimeError_(f"{name}(): Expected self.dtype to be equal to src.dtype")
    d = normalize_dim(dim, max(x.ndim, 1))
    if index.ndim != x.ndim and index.numel() > 0:
        raise RuntimeError_("Index tensor must have the same number of dimensions as self tensor")
    for i, n in enumerate(index.shape):
        if (i != d and n > x.shape[i]) or (src is not None and n > src.shape[i]):
            raise RuntimeError_(
                f"Size does not match at dimension {i} expected index {list(index.shape)} to be no larger than "
                f"self {list(x.shape)} apart from dimension {d}"
                + ("" if src is None else f" and to be no larger size than src {list(src.shape)}")
            )
    return d


def _scatter_sum(src: Tensor, index: Tensor, d: int, shape: tuple) -> Tensor:
    """zeros(shape) with src[i][j]... added at [i][index[i][j]]... (along d); src cut to index's shape."""
    if tuple(src.shape) != tuple(index.shape):
        src = mv.basic_index(src, tuple(slice(0, n) for n in index.shape))
    return apply(
        opspec.SCATTER_ADD_ALONG_DIM, (mv.contiguous(src), index), {"axis": d, "shape": shape}, shape, src.dtype
    )


@gradient(opspec.SCATTER_ADD_ALONG_DIM)
def _scatter_add_along_dim_grad(node, out, g):
    src, index = node.inputs
    axis = node.attrs["axis"]
    # take_along_dim reads only index's extent in the other dimensions
    box = tuple(slice(None) if i == axis else slice(0, n) for i, n in enumerate(index.shape))
    g = mv.contiguous(mv.basic_index(g, box)) if tuple(g.shape) != tuple(index.shape) else g
    return apply(opspec.TAKE_ALONG_DIM, (g, index), {"axis": axis}, index.shape, g.dtype), None


def scatter(
    input: Tensor,
    dim: int,
    index: Tensor,
    src: Tensor | float | None = None,
    *,
    value: float | None = None,
    reduce: str | None = None,
) -> Tensor:
    """torch.scatter / Tensor.scatter: input with src (a tensor) or value (a number) written along dim at index.
    Where index repeats a position PyTorch leaves the result undefined; here floats get the mean."""
    if src is None and value is None:
        raise TypeError("scatter() missing required argument 'src' or 'value'")
    if src is not None and not isinstance(src, Tensor):
        src, value = None, src
    d = _check("scatter", input, dim, index, src)
    if reduce is not None:
        if reduce == "add":
            if src is None:
                src = ew.scalar(value, input.dtype, input.device)
                src = mv.expand(src.reshape((1,) * index.ndim), index.shape)
            return scatter_add(input, d, index, src)
        raise UserError(f"scatter(reduce={reduce!r}) is not supported; use reduce='add' or scatter_reduce")
    if src is None:
        src = mv.expand(ew.scalar(value, input.dtype, input.device).reshape((1,) * index.ndim), index.shape)
    with no_grad():
        ones = mv.expand(ew.scalar(1, input.dtype, input.device).reshape((1,) * index.ndim), index.shape)
        count = _scatter_sum(ones, index, d, input.shape)
    scattered = _scatter_sum(src, index, d, input.shape)
    if input.dtype.is_floating_point:
        averaged = ew.div(scattered, ew.maximum(count, 1))
        if src.requires_grad:
            # PyTorch's gradient: every write gets its position's whole gradient (src.grad = grad.gather)
            through = ew.add(averaged.detach(), ew.sub(scattered, scattered.detach()))
            averaged = ew.where(ew.gt(count, 1), through, averaged)
        scattered = averaged
    else:
        scattered = ew.cast(ew.div(scattered, ew.maximum(count, 1)), input.dtype)
    return ew.where(ew.ne(count, 0), scattered, input)


def scatter_add(input: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:
    """torch.scatter_add / Tensor.scatter_add: input plus src added along dim at index (repeats add up)."""
    d = _check("scatter_add", input, dim, index, src)
    return ew.add(input, _scatter_sum(src, index, d, input.shape))


def index_add(input: Tensor, dim: int, index: Tensor, source: Tensor, *, alpha: float = 1) -> Tensor:
    """torch.index_add / Tensor.index_add: input with alpha * source[..., i, ...] added at index[i] along dim."""
    if index.ndim > 1 or index.dtype not in (dtypes.int64, dtypes.int32):
        raise RuntimeError_("index_add_(): Index is supposed to be a vector of int64 or int32")
    if source.dtype != input.dtype:
        raise RuntimeError_(
            f"index_add_(): self ({input.dtype}) and source ({source.dtype}) must have the same scalar type"
        )
    d = normalize_dim(dim, max(input.ndim, 1))
    index = index.reshape(-1).to(dtypes.int64)
    spec, tensors, out_shape = advanced_spec(input, (slice(None),) * d + (index,))
    if tuple(source.shape) != tuple(out_shape):
        raise RuntimeError_(
            f"index_add_(): source of shape {list(source.shape)} does not match the indexed shape {list(out_shape)}"
        )
    if alpha != 1:
        source = ew.mul(source, alpha)
    attrs = {"spec": spec, "shape": input.shape}
    added = apply(opspec.INDEX_PUT_ADD, (mv.contiguous(source), *tensors), attrs, input.shape, input.dtype)
    return ew.add(input, added)


def scatter_(
    input: Tensor,
    dim: int,
    index: Tensor,
    src: Tensor | float | None = None,
    *,
    value: float | None = None,
    reduce: str | None = None,
) -> Tensor:
    return _inplace(input, lambda: scatter(input, dim, index, src, value=value, reduce=reduce))


def scatter_add_(input: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:
    return _inplace(input, lambda: scatter_add(input, dim, index, src))


def index_add_(input: Tensor, dim: int, index: Tensor, source: Tensor, *, alpha: float = 1) -> Tensor:
    return _inplace(input, lambda: index_add(input, dim, index, source, alpha=alpha))
