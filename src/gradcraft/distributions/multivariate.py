"""torch.distributions.MultivariateNormal, by its Cholesky factor: from scale_tril, a covariance or a
precision matrix. The factorization and the triangular solves are written with public ops, one
row or column of the event dimension at a time, so they are differentiable and right for the
small event sizes tutorials use (the cost grows with the event size's square in ops)."""

from __future__ import annotations

import math

import gradcraft as gc
from gradcraft.distributions.distribution import Distribution, broadcast_shape, standard_normal
from gradcraft.errors import RuntimeError_


def _diagonal(matrix):
    n = matrix.shape[-1]
    return (matrix * gc.eye(n, dtype=matrix.dtype, device=matrix.device)).sum(-1)


def cholesky(a):
    """The lower-triangular L with L @ L^T = a (a symmetric positive definite, batched). a is read
    as (a + a^T) / 2, so its gradient is symmetric, as PyTorch's."""
    n = a.shape[-1]
    a = (a + a.transpose(-1, -2)) * 0.5
    rows: list = [[None] * n for _ in range(n)]
    for j in range(n):
        s = a[..., j, j]
        for k in range(j):
            s = s - rows[j][k] ** 2
        if not bool((s > 0).all().item()):
            raise RuntimeError_(f"cholesky: the input is not positive-definite (the leading minor of order {j + 1})")
        rows[j][j] = s.sqrt()
        for i in range(j + 1, n):
            t = a[..., i, j]
            for k in range(j):
                t = t - rows[i][k] * rows[j][k]
            rows[i][j] = t / rows[j][j]
    zero = gc.zeros_like(a[..., 0, 0])
    return gc.stack([gc.stack([rows[i][j] if j <= i else zero for j in range(n)], -1) for i in range(n)], -2)


def solve_lower(lower, b):
    """x with lower @ x = b, for b of shape (..., n, k) (forward substitution)."""
    n = lower.shape[-1]
    rows = []
    for i in range(n):
        r = b[..., i, :]
        for k in range(i):
            r = r - lower[..., i, k : k + 1] * rows[k]
        rows.append(r / lower[..., i, i : i + 1])
    return gc.stack(rows, -2)


def _mahalanobis(lower, diff):
    """|| lower^-1 diff ||^2 over the last dimension, batched."""
    shape = broadcast_shape(lower.shape[:-2], diff.shape[:-1])
    n = lower.shape[-1]
    lower = lower.expand(*shape, n, n)
    solved = solve_lower(lower, diff.expand(*shape, n).unsqueeze(-1)).squeeze(-1)
    return (solved**2).sum(-1)


class MultivariateNormal(Distribution):
    arg_constraints = {"loc": "IndependentConstraint(Real(), 1)", "scale_tril": "LowerCholesky()"}
    has_rsample = True

    def __init__(self, loc, covariance_matrix=None, precision_matrix=None, scale_tril=None, validate_args=None):
        if loc.ndim < 1:
            raise ValueError("loc must be at least one-dimensional.")
        if (covariance_matrix is not None) + (scale_tril is not None) + (precision_matrix is not None) != 1:
            raise ValueError("Exactly one of covariance_matrix or precision_matrix or scale_tril may be specified.")
        given = next(m for m in (scale_tril, covariance_matrix, precision_matrix) if m is not None)
        if given.ndim < 2:
            raise ValueError(
                "scale_tril, covariance_matrix or precision_matrix must be at least two-dimensional, "
                "with optional leading batch dimensions"
            )
        if scale_tril is not None:
            lower = scale_tril
        else:
            name = "covariance_matrix" if covariance_matrix is not None else "precision_matrix"
            try:
                lower = cholesky(given)
            except RuntimeError_:
                raise ValueError(
                    f"Expected parameter {name} (Tensor of shape {tuple(given.shape)}) of distribution "
                    "MultivariateNormal to satisfy the constraint PositiveDefinite(), but found invalid values"
                ) from None
            if precision_matrix is not None:
                n = given.shape[-1]
                inverse_factor = solve_lower(lower, gc.eye(n, dtype=given.dtype).expand(*given.shape))
                lower = cholesky(inverse_factor.transpose(-1, -2) @ inverse_factor)
        batch = broadcast_shape(loc.shape[:-1], lower.shape[:-2])
        n = loc.shape[-1]
        self.loc = loc.expand(*batch, n)
        self._unbroadcasted_scale_tril = lower
        self.scale_tril = lower.expand(*batch, n, n)
        super().__init__(batch, (n,), validate_args)

    @property
    def covariance_matrix(self):
        return self.scale_tril @ self.scale_tril.transpose(-1, -2)

    @property
    def precision_matrix(self):
        n = self.event_shape[0]
        inverse_factor = solve_lower(self.scale_tril, gc.eye(n, dtype=self.loc.dtype).expand(*self.scale_tril.shape))
        return inverse_factor.transpose(-1, -2) @ inverse_factor

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @property
    def variance(self):
        return (self.scale_tril**2).sum(-1)

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        eps = standard_normal(shape, self.loc)
        return self.loc + (self._unbroadcasted_scale_tril @ eps.unsqueeze(-1)).squeeze(-1)

    def _half_log_det(self):
        return _diagonal(self._unbroadcasted_scale_tril).log().sum(-1)

    def log_prob(self, value):
        n = self.event_shape[0]
        m = _mahalanobis(self._unbroadcasted_scale_tril, value - self.loc)
        return -0.5 * (n * math.log(2 * math.pi) + m) - self._half_log_det()

    def entropy(self):
        n = self.event_shape[0]
        h = 0.5 * n * (1.0 + math.log(2 * math.pi)) + self._half_log_det()
        return h.expand(*self.batch_shape) if self.batch_shape else h


def kl_mvn_mvn(p, q):
    """KL(p || q) of two MultivariateNormals of one event size."""
    if p.event_shape != q.event_shape:
        raise ValueError(
            "KL-divergence between two Multivariate Normals with different event shapes cannot be computed"
        )
    n = p.event_shape[0]
    shape = broadcast_shape(p.batch_shape, q.batch_shape)
    lq = q._unbroadcasted_scale_tril.expand(*shape, n, n)
    lp = p._unbroadcasted_scale_tril.expand(*shape, n, n)
    trace = (solve_lower(lq, lp) ** 2).sum((-2, -1))
    m = _mahalanobis(q._unbroadcasted_scale_tril, q.loc - p.loc)
    return q._half_log_det() - p._half_log_det() + 0.5 * (trace + m - n)
