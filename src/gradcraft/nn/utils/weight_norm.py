"""torch.nn.utils.weight_norm / remove_weight_norm (the older, hook-based form): the parameter `name`
is replaced by a magnitude `name_g` and a direction `name_v`, and a forward pre-hook recomputes
`name = v * (g / ||v||)` (the norm over every dimension but `dim`; over all of them for dim=None)
before each call, as PyTorch's WeightNorm does."""

from __future__ import annotations

import warnings

from gradcraft.errors import ValueError_


def norm_except_dim(v, pow: float = 2, dim: int = 0):
    if dim == -1:
        return v.norm(pow)
    dim = dim % v.ndim
    others = tuple(d for d in range(v.ndim) if d != dim)
    if not others:
        return v.abs()
    return (v.abs() ** pow).sum(others, keepdim=True) ** (1.0 / pow)


class WeightNorm:
    def __init__(self, name: str, dim: int) -> None:
        self.name, self.dim = name, -1 if dim is None else dim

    def compute_weight(self, module):
        g, v = getattr(module, self.name + "_g"), getattr(module, self.name + "_v")
        return v * (g / norm_except_dim(v, 2, self.dim))

    @staticmethod
    def apply(module, name: str, dim: int):
        from gradcraft.nn.module import Parameter

        for hook, _ in module.__dict__.get("_forward_pre_hooks", {}).values():
            if isinstance(hook, WeightNorm) and hook.name == name:
                raise RuntimeError(f"Cannot register two weight_norm hooks on the same parameter {name}")
        fn = WeightNorm(name, dim)
        weight = getattr(module, name)
        if weight is None or name not in module._parameters:
            raise ValueError_(f"Module {type(module).__name__} has no parameter {name!r}")
        del module._parameters[name]
        object.__delattr__(module, name)
        module.register_parameter(name + "_g", Parameter(norm_except_dim(weight, 2, fn.dim).detach()))
        module.register_parameter(name + "_v", Parameter(weight.detach()))
        setattr(module, name, fn.compute_weight(module))
        module.register_forward_pre_hook(fn)
        return fn

    def remove(self, module) -> None:
        from gradcraft.nn.module import Parameter

        weight = self.compute_weight(module).detach()
        for suffix in ("_g", "_v"):
            module._parameters.pop(self.name + suffix, None)
            module.__dict__.pop(self.name + suffix, None)
        module.__dict__.pop(self.name, None)
        setattr(module, self.name, Parameter(weight))

    def __call__(self, module, inputs) -> None:
        setattr(module, self.name, self.compute_weight(module))


def weight_norm(module, name: str = "weight", dim: int = 0):
    warnings.warn(
        "`torch.nn.utils.weight_norm` is deprecated in favor of `torch.nn.utils.parametrizations.weight_norm`.",
        FutureWarning,
        stacklevel=2,
    )
    WeightNorm.apply(module, name, dim)
    return module


def remove_weight_norm(module, name: str = "weight"):
    hooks = module.__dict__.get("_forward_pre_hooks", {})
    for key, (hook, _) in list(hooks.items()):
        if isinstance(hook, WeightNorm) and hook.name == name:
            hook.remove(module)
            del hooks[key]
            return module
    raise ValueError_(f"weight_norm of '{name}' not found in {module}")
