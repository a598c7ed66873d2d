"""Fused optimizer kernels over Tensors: one multi-tensor launch for AdamW and for the global
gradient norm, where the device has them (`has_fused_optim`). optim/ calls these; the buffers, the
writes and the version bumps stay here, below the public API.

    if has_fused_optim(params):
        stats = grad_norm([p.grad for p in params], max_norm=1.0)    # [norm, clip coefficient]
        adamw_step(params, grads, exp_avgs, exp_avg_sqs, lr_step, ..., grad_scale=stats)
"""

from gradcraft import dtypes
from gradcraft.device import get_backend
from gradcraft.engine.realize import before_write, realize
from gradcraft.tensor import buffer_of, bump_version, from_buffer

# The dtypes the fused kernels read and write.
FUSED_DTYPES = (dtypes.float32, dtypes.bfloat16, dtypes.float16)


def has_fused_optim(params, kernels=("adamw_step",)) -> bool:
    """Whether the multi-tensor kernels named (the fused AdamW by default; clipping's "grad_norm" and
    "scale_many") take every tensor in params: one device that has them (capabilities asked of the
    backend), a fused dtype, realized, contiguous memory."""
    params = list(params)
    if not params or len({p.device for p in params}) != 1:
        return False
    backend = get_backend(params[0].device)
    if not all(backend.has(kernel) for kernel in kernels):
        return False
    return all(p.dtype in FUSED_DTYPES and p.is_realized and buffer_of(p).flags.c_contiguous for p in params)


def _contiguous_buffer(t, dtype=None):
    """t's realized, contiguous buffer, converted to dtype where it differs (a copy then)."""
    t = t.realize()
    if (dtype is not None and t.dtype != dtype) or t.dtype not in FUSED_DTYPES or not buffer_of(t).flags.c_contiguous:
        t = t.to(dtype or dtypes.float32).contiguous().realize()
    return buffer_of(t)


def adamw_step(
    params,
    grads,
    exp_avgs,
    exp_avg_sqs,
    lr_step,
    *,
    beta1: float,
    beta2: float,
    eps: float,
    weight_decay: float,
    grad_scale=None,
) -> None:
    """PyTorch's AdamW rule over lists of tensors, in place, in one launch: params (fused dtypes),
    their gradients (converted to the params' dtype where they differ), float32 moments; lr_step a
    float32 tensor [lr, step]; grad_scale None or the [norm, coefficient] tensor of `grad_norm`,
    whose coefficient multiplies every gradient. Lazy tensors built from the old values keep them
    (gradcraft/ops/inplace.py); every written tensor's version moves on."""
    realize(list(grads))  # one schedule for the lazy gradients (clipped, unscaled...), not one each
    grad_buffers = [_contiguous_buffer(g, p.dtype) for p, g in zip(params, grads)]
    for p in params:
        before_write(p)
    get_backend(params[0].device).adamw_step(
        [buffer_of(p) for p in params],
        grad_buffers,
        [buffer_of(m) for m in exp_avgs],
        [buffer_of(v) for v in exp_avg_sqs],
        buffer_of(lr_step),
        beta1=beta1,
        beta2=beta2,
        eps=eps,
        weight_decay=weight_decay,
        grad_scale=buffer_of(grad_scale)[1:] if grad_scale is not None else None,
    )
    for t in (*params, *exp_avgs, *exp_avg_sqs):
        bump_version(t)


def grad_norm(grads, max_norm: float | None = None):
    """float32 tensor [global L2 norm of all grads, min(1, max_norm / (norm + 1e-6))] (coefficient 1
    when max_norm is None or 0), by one multi-tensor kernel."""
    grads = list(grads)
    device = grads[0].device
    realize(grads)  # one schedule for the lazy gradients, not one each
    stats = get_backend(device).grad_norm([_contiguous_buffer(g) for g in grads], float(max_norm or 0.0))
    return from_buffer(stats, dtypes.float32, device)


def scale_(tensors, stats) -> None:
    """Every tensor times stats[1] (grad_norm's clipping coefficient), in place and in one launch
    (torch._foreach_mul_). Lazy tensors built from the old values keep them; versions move on."""
    tensors = list(tensors)
    for t in tensors:
        before_write(t)
    get_backend(tensors[0].device).scale_many([buffer_of(t) for t in tensors], buffer_of(stats)[1:])
    for t in tensors:
        bump_version(t)
