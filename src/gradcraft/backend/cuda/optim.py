"""Multi-tensor kernels: AdamW over all parameters in one launch, the global grad norm, and casts of
many tensors at once.

Both walk a table of CHUNK-element chunks over a list of tensors (kernels/multi_tensor.cuh). The
tables depend only on the tensors' addresses and sizes, so they are built once and cached.

    adamw_step(params, grads, exp_avgs, exp_avg_sqs, lr_step, *, beta1, beta2, eps, weight_decay,
               grad_scale=None) -> None
        Backend.adamw_step's contract (no defaults: the optimizer's are the only ones). Updates params,
        exp_avgs and exp_avg_sqs in place (torch.optim.AdamW's rule, decoupled weight decay).
        params/grads: lists of contiguous float32, bfloat16 or float16 CuPy arrays;
        exp_avgs/exp_avg_sqs: float32 arrays of the same sizes. lr_step: a float32 device array
        [lr, step] (step counts from 1). grad_scale: None or a float32 device array whose first
        element multiplies every gradient (e.g. grad_norm(...)[1:] for clipping).

    grad_norm(grads, max_norm=0.0) -> float32 device array [norm, min(1, max_norm / (norm + 1e-6))]
        (the second entry is 1 when max_norm is 0). Nothing is copied to the host.

    scale_many(arrays, scale) -> None
        Every array multiplied by scale[0] (a float32 device array, e.g. grad_norm(...)[1:]) in place,
        in float32, rounding once to its dtype: clip_grad_norm_'s scaling of all gradients, one launch.

    cast_many(arrays, dtypes) -> list of new arrays, arrays[i] converted to dtypes[i] (contiguous
        float32, bfloat16 or float16 in and out; rounding as the single cast's), in one launch.
"""

import cupy as cp
import numpy as np

from gradcraft.backend import check_optimizer_state
from gradcraft.backend.cuda import launch as L
from gradcraft.errors import UserError

CHUNK = 65536  # kernels/multi_tensor.cuh
_CODES = {np.dtype(np.float32): 0, np.dtype("bfloat16"): 1, np.dtype(np.float16): 2}


def _check(arrays, what):
    for k, a in enumerate(arrays):
        if a.dtype not in _CODES or not a.flags.c_contiguous:
            raise UserError(
                f"{what}[{k}]: need contiguous float32/bfloat16/float16 arrays, got {a.dtype} {a.shape}"
                f"{'' if a.flags.c_contiguous else ' (not contiguous)'}"
            )


# Every table below goes through launch.constant: cached, and copied in a way CUDA-graph capture records.


def _table(sizes: tuple, device_id: int):
    """Device arrays (chunk -> tensor, chunk -> first element) for tensors of these sizes."""
    tensor, start = [], []
    for k, n in enumerate(sizes):
        for s in range(0, n, CHUNK):
            tensor.append(k)
            start.append(s)
    return L.constant(tensor, np.int32), L.constant(start, np.int64), len(tensor)


def _pointers(key: tuple, device_id: int):
    return L.constant(key, np.uint64)


def _list(arrays):
    return _pointers(tuple(a.data.ptr for a in arrays), cp.cuda.Device().id)


def _int32s(values):
    return L.constant(values, np.int32)


def _codes(arrays):
    """Each array's dtype code (multi_tensor.cuh's TensorList.codes), as a device array."""
    return _int32s([_CODES[a.dtype] for a in arrays])


def _chunks(arrays):
    """(element counts as a device int64 array, chunk -> tensor, chunk -> first element, chunks) for
    a multi-tensor kernel over arrays."""
    sizes = tuple(int(a.size) for a in arrays)
    device = cp.cuda.Device().id
    return (_pointers(sizes, device).view(np.int64), *_table(sizes, device))


def adamw_step(
    params, grads, exp_avgs, exp_avg_sqs, lr_step, *, beta1, beta2, eps, weight_decay, grad_scale=None
) -> None:
    _check(params, "adamw_step params")
    _check(grads, "adamw_step grads")
    # Sizes, dtypes and layout the kernel assumes, checked before the launch: a state of another size
    # (a damaged checkpoint) would make it write out of bounds. One UserError line naming the tensor.
    check_optimizer_state(params, grads, exp_avgs, exp_avg_sqs, "adamw_step")
    for k, a in enumerate((*exp_avgs, *exp_avg_sqs)):
        if a.dtype != np.float32 or not a.flags.c_contiguous:
            name = "exp_avg" if k < len(exp_avgs) else "exp_avg_sq"
            raise UserError(
                f"adamw_step: {name} of parameter {k % max(len(exp_avgs), 1)} must be a contiguous "
                f"float32 array, got {a.dtype}{'' if a.flags.c_contiguous else ' (not contiguous)'}"
            )
    size_array, chunk_tensor, chunk_start, n_chunks = _chunks(params)
    if not n_chunks:
        return
    L.run(
        "adamw.cu",
        "adamw_step",
        min(n_chunks, 4096),
        512,
        (
            _list(params),
            _codes(params),
            _list(grads),
            _codes(grads),
            _list(exp_avgs),
            _list(exp_avg_sqs),
            size_array,
            chunk_tensor,
            chunk_start,
            L.i32(n_chunks),
            cp.asarray(lr_step, dtype=np.float32),
            L.ptr(grad_scale),
            np.float32(beta1),
            np.float32(beta2),
            np.float32(eps),
            np.float32(weight_decay),
        ),
    )


def grad_norm(grads, max_norm=0.0):
    _check(grads, "grad_norm")
    size_array, chunk_tensor, chunk_start, n_chunks = _chunks(grads)
    out = L.empty((2,), np.float32)
    partial = L.empty((max(n_chunks, 1),), np.float64)
    if n_chunks:
        L.run(
            "gradnorm.cu",
            "grad_sumsq",
            min(n_chunks, 4096),
            512,
            (_list(grads), _codes(grads), size_array, chunk_tensor, chunk_start, L.i32(n_chunks), partial),
        )
    else:
        partial.fill(0)
    L.run("gradnorm.cu", "grad_norm_finish", 1, 1024, (partial, L.i32(max(n_chunks, 1)), out, L.f64(max_norm)))
    return out


def scale_many(arrays, scale) -> None:
    _check(arrays, "scale_many")
    size_array, chunk_tensor, chunk_start, n_chunks = _chunks(arrays)
    if n_chunks:
        L.run(
            "gradnorm.cu",
            "scale_many",
            min(n_chunks, 4096),
            512,
            (_list(arrays), _codes(arrays), size_array, chunk_tensor, chunk_start, L.i32(n_chunks), L.ptr(scale)),
        )


def cast_many(arrays, dtypes) -> list:
    _check(arrays, "cast_many")
    outs = [L.empty(a.shape, dtype) for a, dtype in zip(arrays, dtypes)]
    _check(outs, "cast_many outputs")
    size_array, chunk_tensor, chunk_start, n_chunks = _chunks(arrays)
    if n_chunks:
        L.run(
            "cast_many.cu",
            "cast_many",
            min(n_chunks, 4096),
            256,
            (
                _list(arrays),
                _codes(arrays),
                _list(outs),
                _codes(outs),
                size_array,
                chunk_tensor,
                chunk_start,
                L.i32(n_chunks),
            ),
        )
    return outs
