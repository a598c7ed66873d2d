"""Global-norm gradient clipping."""

from gradcraft import dtypes
from gradcraft.engine.realize import realize
from gradcraft.ops.function import no_grad
from gradcraft.ops.optim import grad_norm


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
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return None
    return grad_norm(grads, max_norm)
