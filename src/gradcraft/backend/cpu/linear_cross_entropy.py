"""The fused output layer + loss whose logits are never whole: the reference of
cuda/linear_cross_entropy.py and of the C kernel (native/linear_cross_entropy.py)."""

import numpy as np

from gradcraft.backend.cpu.common import _finish, _wide
from gradcraft.backend.cpu.cross_entropy import _cross_entropy, _cross_entropy_backward


def _linear_cross_entropy(
    x, w, target, *, ignore_index=-100, label_smoothing=0.0, valid_classes=None, chunk_bytes=256 << 20
):
    """Reference of the fused output layer + loss (cuda/linear_cross_entropy.py): the sum over rows
    of cross_entropy(x @ w^T, target) and its gradients dx and dw, chunk by chunk of rows, so the
    (N, V) logits are never held whole. Logits and dlogits are rounded to x's dtype as the unfused
    path's would be; dw is summed over the chunks in the accumulator type."""
    n, c = x.shape
    v = w.shape[0]
    wide = np.float64 if x.dtype == np.float64 else np.float32
    wx, ww = _wide(x).astype(wide, copy=False), _wide(w).astype(wide, copy=False)
    rows = max(1, min(n, chunk_bytes // max(v * x.dtype.itemsize, 1)))  # (the CUDA kernel's chunks differ: same sums)
    total = np.zeros((), wide)
    dx = np.empty((n, c), wide)
    dw = np.zeros((v, c), wide)
    ones = np.ones(rows, wide)
    for start in range(0, n, rows):
        end = min(n, start + rows)
        logits = _finish(wx[start:end] @ ww.T, x.dtype)
        losses = _cross_entropy(logits, target[start:end], ignore_index, label_smoothing, valid_classes, True)
        total += _wide(losses).astype(wide).sum()
        dlogits = _wide(
            _cross_entropy_backward(
                logits, target[start:end], ones[: end - start], ignore_index, label_smoothing, valid_classes, True
            )
        ).astype(wide, copy=False)
        dx[start:end] = dlogits @ ww
        dw += dlogits.T @ wx[start:end]
    return total, _finish(dx, x.dtype), _finish(dw, w.dtype)


KERNELS = {"linear_cross_entropy": _linear_cross_entropy}
