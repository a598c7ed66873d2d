"""Matrix kernels over the last two axes (batched): inverse, sign and log-magnitude of the
determinant, Cholesky factor; NumPy's LAPACK routines, 16-bit inputs computed in float32.
A singular or non-positive-definite input raises LinAlgError with PyTorch's message."""

import numpy as np

from gradcraft.backend.cpu.common import _finish, _wide
from gradcraft.errors import LinAlgError


def _batches(a: np.ndarray):
    """(index, matrix) of each matrix of a batch (one, unbatched)."""
    flat = a.reshape(-1, *a.shape[-2:])
    return enumerate(flat) if a.ndim > 2 else [(None, a)]


def _where(batch) -> str:
    return "" if batch is None else f"(Batch element {batch}): "


def _zero_pivot(m: np.ndarray):
    """The 1-based position of the first zero on U's diagonal of LU with partial pivoting (LAPACK's
    getrf), or None."""
    u = m.astype(np.float64, copy=True)
    n = u.shape[0]
    for k in range(n):
        p = k + int(np.argmax(np.abs(u[k:, k])))
        if u[p, k] == 0:
            return k + 1
        u[[k, p]] = u[[p, k]]
        u[k + 1 :, k:] -= np.outer(u[k + 1 :, k] / u[k, k], u[k, k:])
    return None


def _inv(a, caller="linalg.inv"):
    w = _wide(a)
    try:
        return _finish(np.linalg.inv(w), a.dtype)
    except np.linalg.LinAlgError:
        pass
    for batch, m in _batches(w):
        pivot = _zero_pivot(m)
        if pivot is not None:
            if caller == "linalg.solve":
                raise LinAlgError(
                    f"torch.linalg.solve: {_where(batch)}The solver failed because the input matrix is singular."
                )
            raise LinAlgError(
                f"{caller}: {_where(batch)}The diagonal element {pivot} is zero, the inversion could not be completed "
                "because the input matrix is singular."
            )
    raise LinAlgError(f"{caller}: the input matrix is singular.")


def _slogdet(a):
    """(..., 2): the sign and the log of the magnitude of each determinant, side by side."""
    sign, logabs = np.linalg.slogdet(_wide(a))
    return _finish(np.stack([sign, logabs], axis=-1), a.dtype)


def _cholesky(a):
    w = _wide(a)
    try:
        return _finish(np.linalg.cholesky(w), a.dtype)
    except np.linalg.LinAlgError:
        pass
    for batch, m in _batches(w):
        for order in range(1, m.shape[-1] + 1):
            try:
                np.linalg.cholesky(m[:order, :order])
            except np.linalg.LinAlgError:
                raise LinAlgError(
                    f"linalg.cholesky: {_where(batch)}The factorization could not be completed because the input is "
                    f"not positive-definite (the leading minor of order {order} is not positive-definite)."
                ) from None
    raise LinAlgError("linalg.cholesky: the input is not positive-definite.")


KERNELS = {"linalg_inv": _inv, "linalg_slogdet": _slogdet, "linalg_cholesky": _cholesky}
