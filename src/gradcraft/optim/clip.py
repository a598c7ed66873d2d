"""Global-norm gradient clipping."""

import math

from gradcraft import dtypes
from gradcraft.ops.function import no_grad
from gradcraft.engine.realize import realize
from gradcraft.ops.optim import grad_norm, has_fused_optim, scale_


@no_grad()
def clip_grad_norm_(parameters, max_norm: float, error_if_nonfinite: bool = False):
    """torch.nn.utils.clip_grad_norm_ for the L2 norm: every gradient multiplied in place by
    min(1, max_norm / (norm + 1e-6)), norm = the L2 norm of all of them together (in float32).

    Returns the norm before clipping (a 0-d float32 tensor). Where the device has the multi-tensor
    kernels (float32/bfloat16/float16 gradients on one device), as PyTorch's foreach path: the norm
    in one kernel, the scaling in another, no host sync. Otherwise composed from elementwise ops and
    reductions. error_if_nonfinite: raise PyTorch's error on a NaN or infinite norm (a host sync).
    """
    params = [p for p in parameters if p.grad is not None]
    if not params:
        return None
    grads = [p.grad for p in params]
    stats = None
    realize(grads)  # (one schedule for lazy gradients; the multi-tensor kernels read realized ones)
    if max_norm is not None and max_norm > 0 and has_fused_optim(grads, kernels=("grad_norm", "scale_many")):
        stats = grad_norm(grads, max_norm)
        norm = stats[0]
    else:
        total = (grads[0].to(dtypes.float32) ** 2).sum()
        for g in grads[1:]:
            total = total + (g.to(dtypes.float32) ** 2).sum()
        norm = total.sqrt()
    if error_if_nonfinite:
        check_finite(norm, 2.0)
    if stats is not None:
        scale_(grads, stats)
    elif max_norm is not None:
        coef = (max_norm / (norm + 1e-6)).clamp(max=1.0)
        for g in grads:
            g.mul_(coef)
    dtype = grads[0].dtype  # PyTorch's norm has the gradients' dtype (float32 where they differ)
    return norm.to(dtype) if dtype.is_floating_point and all(g.dtype == dtype for g in grads) else norm


def check_finite(norm, norm_type: float) -> None:
    """PyTorch's error for clip_grad_norm_(error_if_nonfinite=True) on a NaN or infinite norm."""
    if not math.isfinite(norm.item()):
        raise RuntimeError(
            f"The total norm of order {float(norm_type)} for gradients from `parameters` is non-finite, so it "
            "cannot be clipped. To disable this error and scale the gradients by the non-finite norm anyway, "
            "set `error_if_nonfinite=False`"
        )


def grad_norm_and_scale(parameters, max_norm: float | None):
    """The global gradient norm and the clipping coefficient, as one float32 tensor
    [norm, min(1, max_norm / (norm + 1e-6))], computed by one multi-tensor kernel. Gradients are left
    as they are: pass the tensor to `AdamW.step(grad_scale=...)`, which applies the coefficient."""
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return None
    return grad_norm(grads, max_norm)
