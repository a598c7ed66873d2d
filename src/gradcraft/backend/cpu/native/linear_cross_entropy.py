"""The fused output layer + loss on the CPU (`linear_cross_entropy`, float32): BLAS products and the C
kernel cross_entropy_with_grad_f32, chunk by chunk of rows, as backend/cuda/linear_cross_entropy.py
does on the GPU. The reference is `_linear_cross_entropy` in backend/cpu/linear_cross_entropy.py.

Why on the CPU: unfused, a small model's step writes the (N, V) logits, reads them back for the loss,
again for its gradient, and writes that gradient: four passes over the largest array of the step
(32 MB for the `demo` model). Here one pass computes each row's loss and gradient, writing the
gradient over the logits, chunk by chunk of rows (so a big vocabulary's logits are never whole).
Measured on a 2-core Xeon (`demo`, 2048 x 4096 logits): 16 MB chunks ran as fast as one whole; 1 MB
chunks, small enough for L2 cache, were slower, as OpenBLAS's products of 64 rows ran at half speed.
"""

import numpy as np

from gradcraft.backend.cpu import blas
from gradcraft.backend.cpu.native.common import _check_targets, _f32, _over_rows, _ptr

_F32 = np.dtype(np.float32)
CHUNK_BYTES = 16 << 20  # logits of one chunk of rows, at most


def kernels(lib, reference: dict, empty) -> dict:
    def linear_cross_entropy(x, w, target, *, ignore_index=-100, label_smoothing=0.0, valid_classes=None, **options):
        if not _f32(x, w) or x.ndim != 2 or w.ndim != 2 or x.shape[1] != w.shape[1]:
            return reference["linear_cross_entropy"](
                x,
                w,
                target,
                ignore_index=ignore_index,
                label_smoothing=label_smoothing,
                valid_classes=valid_classes,
                **options,
            )
        n, c = x.shape
        v = w.shape[0]
        classes = v if valid_classes is None else valid_classes
        t = np.ascontiguousarray(target, dtype=np.int64)
        _check_targets(t, classes, ignore_index)
        rows = max(1, min(n, min(CHUNK_BYTES, options.get("chunk_bytes", CHUNK_BYTES)) // max(4 * v, 1)))
        losses = empty((n,), _F32)
        dx, dw = empty((n, c), _F32), empty((v, c), _F32)
        if n == 0:
            dw.fill(0)
        chunk = np.empty((rows, v), _F32)
        partial = np.empty((v, c), _F32) if n > rows else None
        for start in range(0, n, rows):
            end = min(n, start + rows)
            grads = chunk[: end - start]
            blas.matmul_into(x[start:end], w.T, grads)  # the logits, then their gradient in their place
            _over_rows(
                lambda a, b, start=start: lib.cross_entropy_with_grad_f32(
                    _ptr(grads), _ptr(t[start:]), _ptr(losses[start:]), classes, v, ignore_index, label_smoothing, a, b
                ),
                end - start,
                v,
            )
            blas.matmul_into(grads, w, dx[start:end])
            blas.matmul_into(grads.T, x[start:end], dw if start == 0 else partial)
            if start:
                dw += partial
        return np.asarray(losses.sum(dtype=np.float32)), dx, dw

    return {"linear_cross_entropy": linear_cross_entropy}
