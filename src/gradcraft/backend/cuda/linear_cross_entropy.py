"""The output layer and its cross-entropy fused: cuBLAS products and the kernels/cross_entropy.cu
launch (cross_entropy.py) chunk by chunk of rows, so the (N, V) logits are never whole. The reference
is `_linear_cross_entropy` in backend/cpu/linear_cross_entropy.py."""

import numpy as np

from gradcraft.backend.cuda import cross_entropy as ce
from gradcraft.backend.cuda import launch as L
from gradcraft.backend.cuda.matmul import gemm

# Logits of one chunk of rows of the linear cross-entropy, at most. Each chunk adds its dw product to a
# float32 accumulator (gpt2-124m's (50304, 768): 154 MB read and written per chunk), but measured on an
# H200 (gpt2-124m bf16, 16 x 1024 rows) 256 MiB chunks (7) and 1 GiB chunks (2) ran equally fast, and
# the small ones peak 1.8 GB lower.
LCE_CHUNK_BYTES = 256 << 20


def lce_chunk_rows(n: int, width: int, itemsize: int, chunk_bytes: int) -> int:
    """Rows per chunk: n split evenly into the fewest chunks of at most chunk_bytes of logits, rounded
    up to a multiple of 64 rows (tile-friendly GEMMs) unless that is all of n; 1 when n is 0 (no chunk,
    but a valid range step)."""
    chunks = max(1, -(-n * width * itemsize // max(chunk_bytes, 1)))
    rows = -(-n // chunks)
    return max(1, min(n, -(-rows // 64) * 64 if rows > 64 else rows))


def linear_cross_entropy(
    x, w, target, *, ignore_index=-100, label_smoothing=0.0, valid_classes=None, chunk_bytes=LCE_CHUNK_BYTES
):
    """The sum over rows of cross_entropy(x @ w^T, target), and its gradients dx (N, C) and dw (V, C),
    without ever holding the (N, V) logits: chunk by chunk of rows, the logits (cuBLAS, in x's dtype),
    the losses and dlogits in one kernel (dlogits written over the logits), then dx = dlogits w and
    dw += dlogits^T x (accumulated in float32, rounded to w's dtype at the end). Returns (float32 loss
    sum (), dx, dw)."""
    x, w, target = L.as_contiguous(x), L.as_contiguous(w), L.as_contiguous(target, np.int64)
    N, C = x.shape
    V = w.shape[0]
    rows = lce_chunk_rows(N, V, x.itemsize, chunk_bytes)
    acc = np.float64 if x.dtype == np.float64 else np.float32
    losses = L.empty((N,), acc)
    dx = L.empty((N, C), x.dtype)
    dw = L.empty((V, C), acc)
    if N == 0:
        dw.fill(0)
    # (g None, grad scale 1; float32 losses for half-precision logits)
    options = (ignore_index, label_smoothing, 1.0, valid_classes, True)
    for start in range(0, N, rows):
        end = min(N, start + rows)
        xc = x[start:end]
        logits = gemm(xc, w.T)  # (n, V)
        ce.launch(logits, target[start:end], None, losses[start:end], logits, *options)  # dlogits over the logits
        gemm(logits, w, out=dx[start:end])
        gemm(logits.T, xc, out=dw, accumulate=start > 0)
        del logits
    return losses.sum(), dx, dw.astype(w.dtype, copy=False)


KERNELS = {"linear_cross_entropy": linear_cross_entropy}
