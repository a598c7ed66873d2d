"""torch.linalg's norms: vector_norm, matrix_norm ('fro', 1, -1, inf, -inf) and norm, composed from
gradcraft's norm and reductions; inv, det, slogdet, solve and cholesky (ops/linalg_solve.py). The
spectral and nuclear norms (ord 2, -2, 'nuc') and the other decompositions are not provided."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gradcraft.errors import RuntimeError_, UserError
from gradcraft.ops import elementwise as ew
from gradcraft.ops import reduce as rd
from gradcraft.ops.linalg import norm as _norm

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor

_INF = float("inf")


def vector_norm(x: Tensor, ord=2, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:
    if dtype is not None:
        x = x.to(dtype)
    if ord == 0:
        return rd.sum(ew.ne(x, 0).to(x.dtype), dim, keepdim)
    return _norm(x, ord, dim, keepdim)


def matrix_norm(A: Tensor, ord="fro", dim=(-2, -1), keepdim: bool = False, *, dtype=None) -> Tensor:
    if dtype is not None:
        A = A.to(dtype)
    if A.ndim < 2:
        raise RuntimeError_("linalg.matrix_norm: The input tensor A must have at least 2 dimensions.")
    rows, cols = (d % A.ndim for d in dim)
    if ord == "fro":
        return _norm(A, 2, (rows, cols), keepdim)
    if ord in (1, -1, _INF, -_INF):
        # 1: the largest column sum of |A| (sum over rows); inf: the largest row sum
        summed, other = (rows, cols) if ord in (1, -1) else (cols, rows)
        sums = rd.sum(ew.abs(A), summed, True)
        out = rd.amax(sums, other, True) if ord > 0 else rd.amin(sums, other, True)
        return out if keepdim else out.squeeze((rows, cols))
    raise UserError(f"linalg.matrix_norm: ord={ord!r} is not supported (needs singular values); use 'fro', 1 or inf")


def norm(A: Tensor, ord=None, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:
    if isinstance(dim, int):
        dim = (dim,)
    if dim is not None and len(dim) == 2:
        return matrix_norm(A, "fro" if ord is None else ord, dim, keepdim, dtype=dtype)
    if dim is None and ord is not None:
        if A.ndim == 2:
            return matrix_norm(A, ord, (-2, -1), keepdim, dtype=dtype)
        if A.ndim != 1:
            raise RuntimeError_(
                f"linalg.norm: If dim is not specified but ord is, the input must be 1D or 2D. Got {A.ndim}D."
            )
    return vector_norm(A, 2 if ord is None else ord, dim, keepdim, dtype=dtype)


# the inverse, determinants, solve and Cholesky factor (gradcraft/ops/linalg_solve.py)
from gradcraft.ops import linalg_solve as _solve  # noqa: E402
from gradcraft.ops.linalg_solve import LinAlgError  # noqa: E402,F401
from gradcraft.ops.out_args import with_out as _with_out  # noqa: E402

inv, det, solve, cholesky = (_with_out(f) for f in (_solve.inv, _solve.det, _solve.solve, _solve.cholesky))  # (out=)
slogdet = _solve.slogdet
