"""torch.nn.utils: gradient clipping (global norm and by value), flat parameter vectors; rnn: packed sequences."""

from gradcraft import dtypes
from gradcraft.ops.function import no_grad
from gradcraft.optim.clip import check_finite
from gradcraft.optim.clip import clip_grad_norm_ as _clip_l2


def _tensors(parameters) -> list:
    from gradcraft.tensor import Tensor

    return [parameters] if isinstance(parameters, Tensor) else list(parameters)


@no_grad()
def clip_grad_norm_(
    parameters, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False, foreach=None
):
    """Scale the gradients so that their global norm is at most max_norm; returns the norm before.
    Same formula as PyTorch: coefficient min(1, max_norm / (norm + 1e-6))."""
    from gradcraft.ops.creation import zeros

    params = [p for p in _tensors(parameters) if p.grad is not None]
    if not params:
        return zeros(())
    wide = dtypes.float64 if any(p.grad.dtype == dtypes.float64 for p in params) else dtypes.float32
    if float(norm_type) == 2.0 and wide == dtypes.float32:
        return _clip_l2(params, max_norm, error_if_nonfinite)
    grads = [p.grad.to(wide) for p in params]
    if norm_type == float("inf"):
        total = grads[0].abs().amax()
        for g in grads[1:]:
            total = total.maximum(g.abs().amax())
    else:
        total = sum(((g.abs() ** norm_type).sum() for g in grads[1:]), (grads[0].abs() ** norm_type).sum())
        total = total ** (1.0 / norm_type)
    if error_if_nonfinite:
        check_finite(total, norm_type)
    coef = (max_norm / (total + 1e-6)).clamp(max=1.0)
    for p in params:
        p.grad.mul_(coef)  # in place, as PyTorch's
    return total


@no_grad()
def clip_grad_value_(parameters, clip_value: float, foreach=None) -> None:
    for p in _tensors(parameters):
        if p.grad is not None:
            p.grad.clamp_(-clip_value, clip_value)  # in place, as PyTorch's


def parameters_to_vector(parameters):
    from gradcraft.ops.movement import cat

    return cat([p.reshape(-1) for p in parameters])


@no_grad()
def vector_to_parameters(vec, parameters) -> None:
    """Write consecutive slices of the flat `vec` into the parameters (the inverse of
    parameters_to_vector); like PyTorch's `param.data = ...`, the write is not recorded by autograd."""
    from gradcraft.tensor import Tensor

    if not isinstance(vec, Tensor):
        raise TypeError(f"expected torch.Tensor, but got: {type(vec).__name__}")
    params = _tensors(parameters)
    pointer = 0
    for param in params:
        n = param.numel()
        param.copy_(vec[pointer : pointer + n].view_as(param))
        pointer += n


from gradcraft.nn.utils import rnn  # noqa: E402, F401  (torch.nn.utils.rnn: packed sequences)
from gradcraft.nn.weight_norm import remove_weight_norm, weight_norm  # noqa: E402, F401

# torch.nn.utils.parametrize / .parametrizations (modules of gradcraft.nn, importable under these names too)
import sys as _sys  # noqa: E402

from gradcraft.nn import parametrizations, parametrize  # noqa: E402

_sys.modules[__name__ + ".parametrize"] = parametrize
_sys.modules[__name__ + ".parametrizations"] = parametrizations
