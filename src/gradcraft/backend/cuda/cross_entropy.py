"""Launchers for kernels/cross_entropy.cu: per-row losses and dlogits of (N, W) logits in one launch
(either may be skipped). backend/cpu/cross_entropy.py is their reference; linear_cross_entropy.py
runs the same kernel chunk by chunk of rows."""

import numpy as np

from gradcraft.backend.cuda import launch as L
from gradcraft.backend.cuda.launch import f64, i32, i64, ptr

CE_THREADS = 512  # CE_THREADS of cross_entropy.cu (its __launch_bounds__; keep equal)


def loss_dtype(logits, float_loss) -> np.dtype:
    """float_loss: half-precision logits give float32 losses (and take a float32 g)."""
    return np.dtype(np.float32) if float_loss and logits.dtype in L.HALF else logits.dtype


def launch(logits, target, g, loss, dlogits, ignore_index, label_smoothing, grad_scale, valid_classes, float_loss):
    """One launch over (N, W) logits and their (N,) targets: the losses into `loss` and the dlogits into
    `dlogits` (contiguous arrays, or None: not computed; dlogits may be logits itself, each element is
    read before it is written). dlogits is scaled by g[row] (None: 1) times grad_scale, e.g. 1 / count
    for a mean loss. Only the first valid_classes columns (None: all W) are classes; the rest are
    padding, with dlogits 0. float_loss: see loss_dtype (losses and g read as they are)."""
    logits, target = L.as_contiguous(logits), L.as_contiguous(target, np.int64)
    N, W = logits.shape
    C = W if valid_classes is None else valid_classes
    if not (N and C):
        return
    wide_loss = loss_dtype(logits, float_loss) != logits.dtype
    g = None if g is None else L.as_contiguous(g, loss_dtype(logits, float_loss))  # (named: alive through the launch)
    access, threads = _layout(W, logits.dtype, (logits, dlogits))
    name = f"cross_entropy_{access}_{L.suffix(logits.dtype)}" + ("_f32loss" if wide_loss else "")
    options = (i32(C), i32(W), i64(ignore_index), f64(label_smoothing), f64(grad_scale))
    L.run("cross_entropy.cu", name, N, threads, (logits, target, ptr(g), ptr(loss), ptr(dlogits), *options))


def _layout(width, dtype, arrays):
    """Access ("v": 16-byte loads and stores, width a multiple of 16 / itemsize and the rows 16-byte
    aligned; "s": one value each) and threads (a block per row, about 8 accesses a thread, 32..512)."""
    access = L.access(dtype, *arrays, width=width)
    accesses = width // (16 // np.dtype(dtype).itemsize) if access == "v" else width
    threads = 32
    while threads < CE_THREADS and threads * 8 < accesses:
        threads *= 2
    return access, threads


def cross_entropy_with_grad(
    logits, target, g=None, ignore_index=-100, label_smoothing=0.0, grad_scale=1.0, valid_classes=None, float_loss=False
):
    """(per-row losses, dlogits) of (N, W) logits in one launch; the arguments as in `launch`."""
    loss = L.empty(logits.shape[:1], loss_dtype(logits, float_loss))
    dlogits = L.empty(logits.shape, logits.dtype)
    launch(logits, target, g, loss, dlogits, ignore_index, label_smoothing, grad_scale, valid_classes, float_loss)
    return loss, dlogits


def cross_entropy(logits, target, ignore_index, label_smoothing, valid_classes=None, float_loss=False):
    loss = L.empty(logits.shape[:1], loss_dtype(logits, float_loss))
    launch(logits, target, None, loss, None, ignore_index, label_smoothing, 1.0, valid_classes, float_loss)
    return loss


def cross_entropy_backward(logits, target, g, ignore_index, label_smoothing, valid_classes=None, float_loss=False):
    dlogits = L.empty(logits.shape, logits.dtype)
    launch(logits, target, g, None, dlogits, ignore_index, label_smoothing, 1.0, valid_classes, float_loss)
    return dlogits


KERNELS = {"cross_entropy": cross_entropy, "cross_entropy_backward": cross_entropy_backward}
