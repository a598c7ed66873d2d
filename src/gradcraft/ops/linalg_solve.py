"""torch.linalg.inv / det / slogdet / solve / cholesky and torch.inverse / det / logdet / slogdet, batched
over the leading axes, with PyTorch's gradients. Three kernels (the inverse, the sign and log|det|, the
Cholesky factor); the determinant, the solve and the gradients are composed from them and matmuls.
A singular (or, for cholesky, non-positive-definite) input raises LinAlgError, a RuntimeError, when
the value is computed."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from gradcraft.backend import opspec
from gradcraft.errors import LinAlgError, RuntimeError_
from gradcraft.ops import elementwise as ew
from gradcraft.ops import movement as mv
from gradcraft.ops.function import apply, gradient
from gradcraft.ops.matmul import matmul

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor

__all__ = ["LinAlgError", "cholesky", "det", "inv", "logdet", "slogdet", "solve"]

_TORCH_DTYPE_NAMES = {"int64": "Long", "int32": "Int", "uint8": "Byte", "bool": "Bool", "int16": "Short"}


def _check_square(A: Tensor, name: str) -> None:
    if not A.dtype.is_floating_point:
        got = _TORCH_DTYPE_NAMES.get(A.dtype.name, A.dtype.name)
        raise RuntimeError_(f"{name}: Expected a floating point or complex tensor as input. Got {got}")
    if A.ndim < 2:
        raise RuntimeError_(
            f"{name}: The input tensor A must have at least 2 dimensions. (got {A.ndim} dimensions)"
            if name != "linalg.inv"
            else f"{name}: The input tensor A must have at least 2 dimensions."
        )
    if A.shape[-1] != A.shape[-2]:
        raise RuntimeError_(
            f"{name}: A must be batches of square matrices, but they are {A.shape[-2]} by {A.shape[-1]} matrices"
        )


def _inv(A: Tensor, caller: str) -> Tensor:
    return apply(opspec.LINALG_INV, (A,), {"caller": caller}, A.shape, A.dtype)


def _mT(x: Tensor) -> Tensor:
    return mv.transpose(x, -2, -1)


@gradient(opspec.LINALG_INV)
def _inv_grad(node, out, g):
    # PyTorch's rule: -A^-T g A^-T
    return (ew.neg(matmul(matmul(_mT(out), g), _mT(out))),)


def inv(A: Tensor) -> Tensor:
    """torch.linalg.inv: the inverse of each square matrix of A (..., n, n)."""
    _check_square(A, "linalg.inv")
    return _inv(A, "linalg.inv")


def inverse(input: Tensor) -> Tensor:
    """torch.inverse: torch.linalg.inv."""
    return inv(input)


class SlogdetResult(NamedTuple):
    """torch.return_types.linalg_slogdet: (sign, logabsdet)."""

    sign: Tensor
    logabsdet: Tensor


def _slogdet_pair(A: Tensor, name: str) -> Tensor:
    _check_square(A, name)
    return apply(opspec.LINALG_SLOGDET, (A,), {}, (*A.shape[:-2], 2), A.dtype)


@gradient(opspec.LINALG_SLOGDET)
def _slogdet_grad(node, out, g):
    # only log|det| carries a gradient: g * A^-T (the sign is piecewise constant)
    (A,) = node.inputs
    g_log = mv.unsqueeze(mv.unsqueeze(g[..., 1], -1), -1)
    return (ew.mul(g_log, _mT(_inv(A, "linalg.slogdet"))),)


def slogdet(A: Tensor) -> SlogdetResult:
    """torch.linalg.slogdet: the sign and the log of the magnitude of each determinant (0 and -inf
    for a singular matrix)."""
    pair = _slogdet_pair(A, "linalg.slogdet")
    return SlogdetResult(pair[..., 0], pair[..., 1])


def det(A: Tensor) -> Tensor:
    """torch.linalg.det: the determinant of each square matrix, sign * exp(log|det|) (its gradient
    det * A^-T, PyTorch's)."""
    pair = _slogdet_pair(A, "linalg.det")
    return ew.mul(pair[..., 0], ew.exp(pair[..., 1]))


def logdet(input: Tensor) -> Tensor:
    """torch.logdet: log(det), NaN where the determinant is negative, -inf where it is 0."""
    pair = _slogdet_pair(input, "logdet")
    return ew.where(ew.lt(pair[..., 0], 0), float("nan"), pair[..., 1])


def solve(A: Tensor, B: Tensor, *, left: bool = True) -> Tensor:
    """torch.linalg.solve: X with A X = B (X A = B where left=False), B a batch of vectors where it
    is one (B of shape (n,) or A's batch shape + (n,)) else of matrices; batch axes broadcast.
    Computed as A^-1 B: its gradients are PyTorch's (gB = A^-T g, gA = -gB X^T)."""
    _check_square(A, "linalg.solve")
    if B.dtype != A.dtype:
        raise RuntimeError_(
            f"linalg.solve: Expected A and B to have the same dtype, but found A of type {A.dtype} and B of type "
            f"{B.dtype} instead"
        )
    vector = B.ndim == 1 or (left and B.ndim == A.ndim - 1 and tuple(B.shape) == tuple(A.shape[:-1]))
    A_inv = _inv(A, "linalg.solve")
    if vector:
        n = A.shape[-1]
        if B.shape[-1] != n:
            raise RuntimeError_(
                "linalg.solve: Incompatible shapes of A and B for the equation AX = B "
                f"({A.shape[-2]}x{n} and {B.shape[-1]}x1)"
            )
        return matmul(A_inv, mv.unsqueeze(B, -1))[..., 0]
    return matmul(A_inv, B) if left else matmul(B, A_inv)


@gradient(opspec.LINALG_CHOLESKY)
def _cholesky_grad(node, out, g):
    # PyTorch's rule (A = L L^T): gA = L^-T Phi L^-1, Phi = (X + tril(X, -1)^T) / 2, X = tril(L^T gL)
    x = mv.tril(matmul(_mT(out), g))
    phi = ew.mul(ew.add(x, _mT(mv.tril(x, -1))), 0.5)
    l_inv = _inv(out, "linalg.cholesky")
    return (matmul(matmul(_mT(l_inv), phi), l_inv),)


def cholesky(A: Tensor, *, upper: bool = False) -> Tensor:
    """torch.linalg.cholesky: L (lower triangular) with A = L L^T for each symmetric positive-definite
    matrix (only A's lower triangle is read); upper=True gives L^T."""
    _check_square(A, "linalg.cholesky")
    L = apply(opspec.LINALG_CHOLESKY, (A,), {}, A.shape, A.dtype)
    return _mT(L) if upper else L
