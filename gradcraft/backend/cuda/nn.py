"""Launchers for the handwritten NN kernels (kernels/*.cu): one function per contract kernel, with
cpu.py's argument names and attributes. Inputs are made contiguous first; outputs come from
launch.empty (poisoned in tests)."""

import cupy as cp
import numpy as np

from gradcraft.backend.cuda import launch as L
from gradcraft.backend.cuda.launch import f64, i32, i64, ptr


def _c(a: cp.ndarray, dtype=None) -> cp.ndarray:
    """Contiguous, and of `dtype` when given (a gradient always arrives in its tensor's dtype from the
    engine; the cast only guards direct callers)."""
    if dtype is not None and a.dtype != dtype:
        a = a.astype(dtype)
    return L.contiguous(a)


def _acc(a, like) -> cp.ndarray | None:
    """A small parameter (norm weight, rope table) in the kernels' accumulator type for `like`'s dtype."""
    return None if a is None else L.contiguous(a.astype(L.acc_dtype(like.dtype), copy=False)).reshape(-1)


def _last_axis(fn, x, axis, *rest):
    """Run a row kernel over `axis` by moving it last (and back)."""
    if axis in (-1, x.ndim - 1):
        return fn(x, *rest)
    moved = [cp.moveaxis(a, axis, -1) for a in (x, *rest)]
    return cp.ascontiguousarray(cp.moveaxis(fn(*moved), -1, axis))  # (ndim >= 1 here)


# ---------------------------------------------------------------- row kernels: layouts

# Values a thread keeps in registers in the warp and block layouts of the row kernels: the E constants
# of softmax.cu and norms.cu (keep them equal).
_SOFTMAX_E = (32, 16)  # SOFTMAX_WARP_E, SOFTMAX_BLOCK_E
_NORM_FWD_E = (32, 16)  # NORM_FWD_WARP_E, NORM_FWD_BLOCK_E
_NORM_BWD_E = (32, 16)  # NORM_BWD_WARP_E, NORM_BWD_BLOCK_E
_WARP_LAYOUT_THREADS = 256  # 8 rows a block (the kernels' __launch_bounds__)


def _layout(width, dtype, arrays, warp_e, block_e, max_threads):
    """How a row kernel takes rows of `width` values: (layout, access, threads).

    layout: "warp" (a row per warp, in registers: width <= 32 * warp_e), "block" (a row per block of
    ceil(width / block_e) threads, rounded up to a warp, in registers: at most max_threads of them) or
    "loop" (a row per block of max_threads, re-read from memory); access: "v" (16-byte loads and
    stores: width a multiple of 16 / itemsize, every array 16-byte aligned) or "s" (one value each)."""
    per_access = 16 // np.dtype(dtype).itemsize
    access = "v" if width % per_access == 0 and L.aligned(*arrays) else "s"
    if width <= 32 * warp_e:
        return "warp", access, _WARP_LAYOUT_THREADS
    threads = -(-width // block_e)
    threads = -(-threads // 32) * 32
    if threads <= max_threads:
        return "block", access, threads
    return "loop", access, max_threads


def _row_grid(layout, rows):
    return -(-rows // (_WARP_LAYOUT_THREADS // 32)) if layout == "warp" else rows


# ---------------------------------------------------------------- softmax family


def softmax_rows(x, scale=1.0, mask=None, causal=False, window=None, T=1, S=1, log=False):
    """Row softmax of x (..., C) * scale (+ float32 additive mask of x's shape), attention masking fused."""
    x = _c(x)
    mask = None if mask is None else _c(mask, np.float32)
    C = x.shape[-1]
    rows = x.size // max(C, 1)
    y = L.empty(x.shape, x.dtype)
    if rows and C:
        layout, access, threads = _layout(C, x.dtype, (x, y, mask), *_SOFTMAX_E, 1024)
        L.run(
            "softmax.cu",
            f"softmax_fwd_{layout}_{access}_{L.suffix(x.dtype)}",
            _row_grid(layout, rows),
            threads,
            (
                x,
                y,
                i64(rows),
                i32(C),
                f64(scale),
                ptr(mask),
                i32(bool(causal)),
                i32(window or 0),
                i32(T),
                i32(S),
                i32(bool(log)),
            ),
        )
    return y


def softmax_rows_backward(y, g, scale=1.0, log=False):
    """dx of y = softmax(x * scale) (scale * y * (g - sum(g * y))) or of y = log_softmax(x) (log)."""
    y, g = _c(y), _c(g, y.dtype)
    C = y.shape[-1]
    rows = y.size // max(C, 1)
    dx = L.empty(y.shape, y.dtype)
    if rows and C:
        layout, access, threads = _layout(C, y.dtype, (y, g, dx), *_SOFTMAX_E, 1024)
        L.run(
            "softmax.cu",
            f"softmax_bwd_{layout}_{access}_{L.suffix(y.dtype)}",
            _row_grid(layout, rows),
            threads,
            (y, g, dx, i64(rows), i32(C), f64(scale), i32(bool(log))),
        )
    return dx


def softmax(x, axis):
    return _last_axis(softmax_rows, x, axis)


def log_softmax(x, axis):
    return _last_axis(lambda a: softmax_rows(a, log=True), x, axis)


def softmax_backward(y, g, axis):
    return _last_axis(softmax_rows_backward, y, axis, g)


def log_softmax_backward(y, g, axis):
    return _last_axis(lambda a, b: softmax_rows_backward(a, b, log=True), y, axis, g)


# ---------------------------------------------------------------- cross-entropy


def cross_entropy_with_grad(
    logits,
    target,
    g=None,
    ignore_index=-100,
    label_smoothing=0.0,
    grad_scale=1.0,
    want_loss=True,
    want_grad=True,
    valid_classes=None,
    float_loss=False,
    loss_out=None,
    dlogits_out=None,
):
    """Per-row losses and dlogits of (N, W) logits in one launch (either may be skipped).

    dlogits is scaled by g[row] (None: 1) times grad_scale, e.g. 1 / count for a mean loss. Only the
    first valid_classes columns (None: all W) are classes; the rest are padding, with dlogits 0.
    float_loss: half-precision logits give float32 losses (and take a float32 g), read as they are.
    loss_out, dlogits_out: contiguous arrays to write into; dlogits_out may be logits itself (each
    element is read before it is written)."""
    logits, target = _c(logits), _c(target, np.int64)
    N, W = logits.shape
    C = W if valid_classes is None else valid_classes
    wide_loss = float_loss and logits.dtype in L.HALF
    loss_dtype = np.dtype(np.float32) if wide_loss else logits.dtype
    loss = (L.empty((N,), loss_dtype) if loss_out is None else loss_out) if want_loss else None
    dlogits = (L.empty((N, W), logits.dtype) if dlogits_out is None else dlogits_out) if want_grad else None
    if N and C:
        g = None if g is None else _c(g, loss_dtype)  # (named: kept alive through the launch)
        access, threads = _ce_layout(W, logits.dtype, (logits, dlogits))
        name = f"cross_entropy_{access}_{L.suffix(logits.dtype)}" + ("_f32loss" if wide_loss else "")
        L.run(
            "cross_entropy.cu",
            name,
            N,
            threads,
            (
                logits,
                target,
                ptr(g),
                ptr(loss),
                ptr(dlogits),
                i32(C),
                i32(W),
                i64(ignore_index),
                f64(label_smoothing),
                f64(grad_scale),
            ),
        )
    return loss, dlogits


_CE_THREADS = 512  # CE_THREADS of cross_entropy.cu (its __launch_bounds__; keep equal)

# Logits of one chunk of rows of the linear cross-entropy, at most. Each chunk adds its dw product to a
# float32 accumulator (gpt2-124m's (50304, 768): 154 MB read and written per chunk), but measured on an
# H200 (gpt2-124m bf16, 16 x 1024 rows) 256 MiB chunks (7) and 1 GiB chunks (2) ran equally fast, and
# the small ones peak 1.8 GB lower.
LCE_CHUNK_BYTES = 256 << 20


def lce_chunk_rows(n: int, width: int, itemsize: int, chunk_bytes: int) -> int:
    """Rows per chunk: n split evenly into the fewest chunks of at most chunk_bytes of logits, rounded
    up to a multiple of 64 rows (tile-friendly GEMMs) unless that is all of n."""
    chunks = max(1, -(-n * width * itemsize // max(chunk_bytes, 1)))
    rows = -(-n // chunks)
    return min(n, max(1, -(-rows // 64) * 64 if rows > 64 else rows))


def linear_cross_entropy(
    x, w, target, *, ignore_index=-100, label_smoothing=0.0, valid_classes=None, chunk_bytes=LCE_CHUNK_BYTES
):
    """The sum over rows of cross_entropy(x @ w^T, target), and its gradients dx (N, C) and dw (V, C),
    without ever holding the (N, V) logits: chunk by chunk of rows, the logits (cuBLAS, in x's dtype),
    the losses and dlogits in one kernel (dlogits written over the logits), then dx = dlogits w and
    dw += dlogits^T x (accumulated in float32, rounded to w's dtype at the end). Returns (float32 loss
    sum (), dx, dw). The reference is `_linear_cross_entropy` in backend/cpu/cross_entropy.py."""
    from gradcraft.backend.cuda.matmul import gemm

    x, w, target = _c(x), _c(w), _c(target, np.int64)
    N, C = x.shape
    V = w.shape[0]
    rows = lce_chunk_rows(N, V, x.itemsize, chunk_bytes)
    acc = np.float64 if x.dtype == np.float64 else np.float32
    losses = L.empty((N,), acc)
    dx = L.empty((N, C), x.dtype)
    dw = L.empty((V, C), acc)
    if N == 0:
        dw.fill(0)
    for start in range(0, N, rows):
        end = min(N, start + rows)
        xc = x[start:end]
        logits = gemm(xc, w.T)  # (n, V)
        cross_entropy_with_grad(
            logits,
            target[start:end],
            None,
            ignore_index,
            label_smoothing,
            valid_classes=valid_classes,
            float_loss=True,
            loss_out=losses[start:end],
            dlogits_out=logits,
        )
        gemm(logits, w, out=dx[start:end])
        gemm(logits.T, xc, out=dw, accumulate=start > 0)
        del logits
    return losses.sum(), dx, dw.astype(w.dtype, copy=False)


def _ce_layout(width, dtype, arrays):
    """Access ("v": 16-byte loads and stores, width a multiple of 16 / itemsize and the rows 16-byte
    aligned; "s": one value each) and threads (a block per row, about 8 accesses a thread, 32..512)."""
    per_access = 16 // np.dtype(dtype).itemsize
    access = "v" if width % per_access == 0 and L.aligned(*arrays) else "s"
    accesses = width // per_access if access == "v" else width
    threads = 32
    while threads < _CE_THREADS and threads * 8 < accesses:
        threads *= 2
    return access, threads


def cross_entropy(logits, target, ignore_index, label_smoothing, valid_classes=None, float_loss=False):
    return cross_entropy_with_grad(
        logits,
        target,
        None,
        ignore_index,
        label_smoothing,
        want_grad=False,
        valid_classes=valid_classes,
        float_loss=float_loss,
    )[0]


def cross_entropy_backward(logits, target, g, ignore_index, label_smoothing, valid_classes=None, float_loss=False):
    return cross_entropy_with_grad(
        logits,
        target,
        g,
        ignore_index,
        label_smoothing,
        want_loss=False,
        valid_classes=valid_classes,
        float_loss=float_loss,
    )[1]


# ---------------------------------------------------------------- norms


def _norm_params(x, *params):
    """Norm weight/bias as the kernels read them, flat, and w_acc: in x's dtype as they are (0; what the
    engine passes), else in the accumulator type (1, a small cast). None stays None."""
    if all(p is None or p.dtype == x.dtype for p in params):
        return [None if p is None else L.contiguous(p).reshape(-1) for p in params], 0
    return [_acc(p, x) for p in params], 1


def _norm_forward(x, weight, bias, eps, n_dims, center):
    x = _c(x)
    F = int(np.prod(x.shape[x.ndim - n_dims :]))
    rows = x.size // max(F, 1)
    y = L.empty(x.shape, x.dtype)
    (w, b), w_acc = _norm_params(x, weight, bias)  # (named: a temporary's memory could be reused before the launch)
    if rows and F:
        layout, access, threads = _layout(F, x.dtype, (x, y, w, b), *_NORM_FWD_E, 1024)
        L.run(
            "norms.cu",
            f"norm_fwd_{layout}_{access}_{L.suffix(x.dtype)}",
            _row_grid(layout, rows),
            threads,
            (x, ptr(w), ptr(b), i32(w_acc), y, i64(rows), i32(F), f64(eps), i32(center)),
        )
    return y


def _norm_backward(x, weight, g, eps, n_dims, center):
    """(dx, dweight, dbias or None without center). Each block of the first kernel leaves its rows'
    weight/bias gradients in `partial` (blocks, 2, F), float32 (float64 for float64); norm_reduce adds
    the slices in a fixed order."""
    x = _c(x)
    g = _c(g, x.dtype)
    norm_shape = x.shape[x.ndim - n_dims :]
    F = int(np.prod(norm_shape))
    rows = x.size // max(F, 1)
    dx = L.empty(x.shape, x.dtype)
    dweight = L.empty(norm_shape, x.dtype)  # cpu.py gives the weight gradients x's dtype
    dbias = L.empty(norm_shape, x.dtype) if center else None
    if not (rows and F):
        for out in (dweight, dbias):
            if out is not None:
                out.fill(0)
        return dx, dweight, dbias
    (w,), w_acc = _norm_params(x, weight)
    layout, access, threads = _layout(F, x.dtype, (x, g, dx, w), *_NORM_BWD_E, 512)
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


# ---------------------------------------------------------------- rope, embedding, dropout


def _access(dtype, *arrays, width=None):
    """ "v" where the kernels can move 16 bytes per access (every array 16-byte aligned, and `width`, when
    given, a multiple of the values per access), else "s"."""
    per_access = 16 // np.dtype(dtype).itemsize
    ok = (width is None or width % per_access == 0) and L.aligned(*arrays)
    return "v" if ok else "s"


def rope(x, cos, sin, inverse):
    x = _c(x)
    T, D = x.shape[-2], x.shape[-1]
    half = D // 2
    rows = x.size // max(D, 1)
    y = L.empty(x.shape, x.dtype)
    if rows and half:
        L.run(
            "rope.cu",
            f"rope_{L.suffix(x.dtype)}",
            L.grid_1d(rows * half),
            256,
            (x, _acc(cos, x), _acc(sin, x), y, i64(rows), i32(T), i32(half), i32(bool(inverse))),
        )
    return y


def embedding(weight, idx):
    weight, idx = _c(weight), _c(idx, np.int64)
    D = int(np.prod(weight.shape[1:]))
    out = L.empty(idx.shape + weight.shape[1:], weight.dtype)
    n = idx.size
    if n and D:
        row_bytes = D * weight.dtype.itemsize  # copied in the widest unit that divides it and the alignment
        unit = next(u for u in (16, 8, 4, 2, 1) if row_bytes % u == 0 and L.aligned(weight, out, to=u))
        L.run(
            "embedding.cu",
            f"embedding_fwd_{unit}",
            min(-(-n // 8), 65535 * 8),
            256,
            (weight, idx, out, i64(n), i32(row_bytes // unit), i64(weight.shape[0])),
        )
    return out


def embedding_backward(idx, g, num_embeddings):
    """The table's gradient: a stable sort of the ids, then chunks of 32 sorted positions summed per
    warp (embedding.cu); every row that no id names stays zero."""
    D = g.shape[-1]
    flat = _c(idx, np.int64).reshape(-1)
    g = _c(g)
    out = cp.zeros((num_embeddings, D), dtype=g.dtype)
    n = flat.size
    if n and D:
        order = cp.argsort(flat).astype(np.int64, copy=False)  # CuPy's sort is stable: equal ids keep their order
        access = _access(g.dtype, g, out, width=D)
        vectors = D // (16 // g.dtype.itemsize) if access == "v" else D
        chunks = -(-n // 32)
        part = cp.empty((chunks, 2, D), dtype=L.acc_dtype(g.dtype))  # (only the slots a run leaves are read)
        tasks = chunks * -(-vectors // 32)  # a warp each: 32 positions x 32 accesses of a row
        grid = min(-(-tasks // 8), 65535 * 8)
        args = (i64(n), i32(D), i64(num_embeddings))
        L.run(
            "embedding.cu",
            f"embedding_bwd_chunk_{access}_{L.suffix(g.dtype)}",
            grid,
            256,
            (flat, order, g, out, part, *args),
        )
        L.run(
            "embedding.cu",
            f"embedding_bwd_join_{access}_{L.suffix(g.dtype)}",
            grid,
            256,
            (flat, order, out, part, *args),
        )
    return out


def dropout(x, state=None, *, p, stream=0, seed=None):
    """state: the int64 device array [seed, counter] that the kernel reads (so a replayed graph sees the
    counter move); stream: this layer's place in the step. `seed=` without a state (kernel tests and
    benchmarks) means state [seed, 0]: a host-to-device copy, so never inside a captured step."""
    x = _c(x)
    if state is None:
        state = cp.asarray(np.array([seed, 0], dtype=np.uint64).view(np.int64))
    y = L.empty(x.shape, x.dtype)
    if x.size:
        L.run(
            "dropout.cu",
            f"dropout_{L.suffix(x.dtype)}",
            L.grid_1d(-(-x.size // 4)),
            256,
            (x, y, i64(x.size), _c(state, np.int64), np.uint64(stream), f64(p), f64(1.0 / (1.0 - p))),
        )
    return y


def attention_dropout(x, state, *, p, stream, T, S, i0=0, j0=0):
    """The explicit attention path's dropout: x (..., t, s) weights of queries i0.. and keys j0.. of a
    (B, H, T, S) attention, dropped with the flash kernels' mask (backend/philox.py) and scaled."""
    from gradcraft.backend import philox

    x = _c(x)
    y = L.empty(x.shape, x.dtype)
    if x.size:
        t, s = x.shape[-2], x.shape[-1]
        L.run(
            "dropout.cu",
            f"attention_dropout_{L.suffix(x.dtype)}",
            L.grid_1d(x.size),
            256,
            (
                x,
                y,
                i64(x.size),
                L.i32(t),
                L.i32(s),
                L.i32(T),
                L.i32(S),
                L.i32(i0),
                L.i32(j0),
                _c(state, np.int64),
                np.uint32(stream),
                np.uint32(philox.threshold(p)),
                np.float32(philox.keep_scale(p)),
            ),
        )
    return y


KERNELS = {
    "softmax": softmax,
    "softmax_backward": softmax_backward,
    "log_softmax": log_softmax,
    "log_softmax_backward": log_softmax_backward,
    "cross_entropy": cross_entropy,
    "cross_entropy_backward": cross_entropy_backward,
    "linear_cross_entropy": linear_cross_entropy,
    "layer_norm": layer_norm,
    "layer_norm_backward": layer_norm_backward,
    "rms_norm": rms_norm,
    "rms_norm_backward": rms_norm_backward,
    "embedding": embedding,
    "embedding_backward": embedding_backward,
    "dropout": dropout,
    "attention_dropout": attention_dropout,
    "rope": rope,
}
