"""Weight normalisation, w = g * v / ||v|| (the norm over every dimension but `dim`), in both of
PyTorch's forms: torch.nn.utils.parametrizations.weight_norm (a parametrization with original0 = g
and original1 = v) and the older torch.nn.utils.weight_norm (parameters `<name>_g` and `<name>_v`,
and `remove_weight_norm` to fold them back into one parameter)."""

from __future__ import annotations

from gradcraft.nn.module import Module, Parameter
from gradcraft.nn.parametrize import _inject_new_class, register_parametrization
from gradcraft.tensor import Tensor


def norm_except_dim(v: Tensor, pow: float = 2, dim: int = 0) -> Tensor:
    """The p-norm of v over every dimension but `dim`, shaped to broadcast against v (dim=-1: over all)."""
    if dim == -1:
        return v.norm(pow)
    if dim == 0:
        return v.reshape(v.shape[0], -1).norm(pow, dim=1).reshape(v.shape[0], *([1] * (v.ndim - 1)))
    if dim == v.ndim - 1:
        return v.reshape(-1, v.shape[-1]).norm(pow, dim=0).reshape(*([1] * (v.ndim - 1)), v.shape[-1])
    return norm_except_dim(v.transpose(0, dim), pow, 0).transpose(0, dim)


def _weight_norm(v: Tensor, g: Tensor, dim: int = 0) -> Tensor:
    return v * (g / norm_except_dim(v, 2, dim))


class _WeightNorm(Module):
    def __init__(self, dim: int | None = 0) -> None:
        super().__init__()
        self.dim = -1 if dim is None else dim

    def forward(self, weight_g: Tensor, weight_v: Tensor) -> Tensor:
        return _weight_norm(weight_v, weight_g, self.dim)

    def right_inverse(self, weight: Tensor):
        return norm_except_dim(weight, 2, self.dim), weight


def parametrized_weight_norm(module: Module, name: str = "weight", dim: int = 0):
    """torch.nn.utils.parametrizations.weight_norm."""
    register_parametrization(module, name, _WeightNorm(dim), unsafe=True)
    return module


def weight_norm(module: Module, name: str = "weight", dim: int = 0):
    """torch.nn.utils.weight_norm: `name` replaced by parameters `name_g` (the norms) and `name_v` (the
    direction); reading `module.<name>` computes g * v / ||v||."""
    dim = -1 if dim is None else dim
    norms = module.__dict__.setdefault("_weight_norm_dims", {})
    if name in norms:
        raise RuntimeError(f"Cannot register two weight_norm hooks on the same parameter {name}")
    weight = getattr(module, name)
    if not isinstance(weight, Parameter):
        raise TypeError(f"weight_norm: {name!r} of {type(module).__name__} is not a parameter")
    delattr(module, name)
    module.register_parameter(name + "_g", Parameter(norm_except_dim(weight, 2, dim).detach()))
    module.register_parameter(name + "_v", Parameter(weight.detach()))
    norms[name] = dim
    if type(module).__dict__.get("_weight_norm_class") is None:
        _inject_new_class(module, type(module).__name__)  # the printed name stays the layer's
        type(module)._weight_norm_class = True

    def compute(self, name=name):
        return _weight_norm(getattr(self, name + "_v"), getattr(self, name + "_g"), self._weight_norm_dims[name])

    setattr(type(module), name, property(compute))
    return module


def remove_weight_norm(module: Module, name: str = "weight"):
    """Fold `name_g` and `name_v` back into one parameter `name`."""
    norms = module.__dict__.get("_weight_norm_dims", {})
    if name not in norms:
        raise ValueError(f"weight_norm of '{name}' not found in {module}")
    weight = getattr(module, name).detach()
    delattr(type(module), name)
    delattr(module, name + "_g")
    delattr(module, name + "_v")
    del norms[name]
    module.register_parameter(name, Parameter(weight))
    if not norms:
        module.__class__ = type(module).__bases__[0]
    return module
