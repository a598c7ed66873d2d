"""Global-norm gradient clipping."""

from gradcraft import dtypes
from gradcraft.engine.realize import realize
from gradcraft.ops.function import no_grad


@no_grad()
def clip_grad_norm_(parameters, max_norm: float, realize_norm: bool = True):
    """Scale all gradients by min(1, max_norm / (norm + 1e-6)), norm = the L2 norm of all of them together.

    Returns the norm before clipping (a 0-d float32 tensor). The scaled gradients stay lazy and are
    computed with the optimizer's update.
    """
    params = [p for p in parameters if p.grad is not None]
    if not params:
        return None
    squares = [(p.grad.to(dtypes.float32) ** 2).sum() for p in params]
    total = squares[0]
    for s in squares[1:]:
        total = total + s
    norm = total.sqrt()
    if realize_norm:
        realize([norm] + [p.grad for p in params])
    if max_norm is not None and max_norm > 0:
        coef = (max_norm / (norm + 1e-6)).clamp(max=1.0)
        for p in params:
            p.grad = p.grad * coef.to(p.grad.dtype)
    return norm


def grad_norm_and_scale(parameters, max_norm: float | None):
    """The global gradient norm and the clipping coefficient, as one float32 tensor
    [norm, min(1, max_norm / (norm + 1e-6))], computed by one multi-tensor kernel. Gradients are left
    as they are: pass the tensor to `AdamW.step(grad_scale=...)`, which applies the coefficient."""
    from gradcraft.device import get_backend
    from gradcraft.tensor import Tensor

    params = [p for p in parameters if p.grad is not None]
    if not params:
        return None
    device = params[0].device
    grads = []
    for p in params:
        g = p.grad.realize()
        if not g._buf.flags.c_contiguous or g.dtype not in (dtypes.float32, dtypes.bfloat16, dtypes.float16):
            g = g.float().contiguous().realize()
        grads.append(g._buf)
    stats = get_backend(device).grad_norm(grads, float(max_norm or 0.0))
    return Tensor._from_buffer(stats, dtypes.float32, device)
