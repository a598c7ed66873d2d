"""Launchers for kernels/norms.cu: LayerNorm and RMSNorm over the last n_dims dimensions, forward and
backward (the weight and bias gradients summed without atomics). backend/cpu/norms.py is their
reference."""

import cupy as cp
import numpy as np

from gradcraft.backend.cuda import launch as L
from gradcraft.backend.cuda import rows as R
from gradcraft.backend.cuda.launch import f64, i32, i64, ptr


def _norm_params(x, *params):
    """Norm weight/bias as the kernels read them, flat, and w_acc: in x's dtype as they are (0; what the
    engine passes), else in the accumulator type (1, a small cast). None stays None."""
    if all(p is None or p.dtype == x.dtype for p in params):
        return [None if p is None else L.contiguous(p).reshape(-1) for p in params], 0
    return [L.acc_param(p, x) for p in params], 1


def _norm_forward(x, weight, bias, eps, n_dims, center):
    x = L.as_contiguous(x)
    F = int(np.prod(x.shape[x.ndim - n_dims :]))
    rows = x.size // max(F, 1)
    y = L.empty(x.shape, x.dtype)
    (w, b), w_acc = _norm_params(x, weight, bias)  # (named: a temporary's memory could be reused before the launch)
    if rows and F:
        args = (x, ptr(w), ptr(b), i32(w_acc), y, i64(rows), i32(F), f64(eps), i32(center))
        R.run("norms.cu", "norm_fwd", rows, F, (x, y, w, b), R.NORM_FWD_E, args)
    return y


def _norm_backward(x, weight, g, eps, n_dims, center):
    """(dx, dweight, dbias or None without center). Each block of the first kernel leaves its rows'
    weight/bias gradients in `partial` (blocks, 2, F), float32 (float64 for float64); norm_reduce adds
    the slices in a fixed order."""
    x = L.as_contiguous(x)
    g = L.as_contiguous(g, x.dtype)
    norm_shape = x.shape[x.ndim - n_dims :]
    F = int(np.prod(norm_shape))
    rows = x.size // max(F, 1)
    dx = L.empty(x.shape, x.dtype)
    dweight = L.empty(norm_shape, x.dtype)  # backend/cpu/ gives the weight gradients x's dtype
    dbias = L.empty(norm_shape, x.dtype) if center else None
    if not (rows and F):
        for out in (dweight, dbias):
            if out is not None:
                out.fill(0)
        return dx, dweight, dbias
    (w,), w_acc = _norm_params(x, weight)
    layout, access, threads = R.layout(F, x.dtype, (x, g, dx, w), *R.NORM_BWD_E, 512)
    sms = L.sm_count()
    if layout == "warp":  # 4 rows (warps) a block, about 4 blocks an SM (their registers)
        threads, blocks = 128, min(-(-rows // 4), 4 * sms)
    elif layout == "block":
        blocks = min(rows, sms * max(1, 1024 // threads))
    else:
        blocks = min(rows, 2 * sms)
    partial = cp.empty((blocks, 2, F), dtype=L.acc_dtype(x.dtype))  # (every slice read is written first)
    L.run(
        "norms.cu",
        f"norm_bwd_{layout}_{access}_{L.suffix(x.dtype)}",
        blocks,
        threads,
        (x, ptr(w), i32(w_acc), g, dx, partial, i64(rows), i32(F), f64(eps), i32(center)),
    )
    columns = 2 * F if center else F
    L.run(
        "norms.cu",
        f"norm_reduce_{L.suffix(x.dtype)}",
        -(-columns // 32),
        1024,  # 32 columns x 32 groups
        (partial, dweight, ptr(dbias), i32(blocks), i32(F)),
    )
    return dx, dweight, dbias


def layer_norm(x, weight, bias, eps, n_dims):
    return _norm_forward(x, weight, bias, eps, n_dims, center=1)


def layer_norm_backward(x, weight, g, eps, n_dims):
    return _norm_backward(x, weight, g, eps, n_dims, center=1)


def rms_norm(x, weight, eps, n_dims):
    return _norm_forward(x, weight, None, eps, n_dims, center=0)


def rms_norm_backward(x, weight, g, eps, n_dims):
    return _norm_backward(x, weight, g, eps, n_dims, center=0)[:2]


KERNELS = {
    "layer_norm": layer_norm,
    "layer_norm_backward": layer_norm_backward,
    "rms_norm": rms_norm,
    "rms_norm_backward": rms_norm_backward,
}
