"""torch.nn.utils.parametrize: a module's parameter computed from other tensors by a module.

`register_parametrization(module, "weight", P)` moves the original tensor into
`module.parametrizations.weight` (a ParametrizationList: `original`, or `original0`, `original1`...
when P.right_inverse returns several tensors) and makes `module.weight` a property that returns
P(original) each time it is read. As in PyTorch the module's class becomes a subclass named
`Parametrized<Class>` holding the property, so other instances of the class are untouched."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from gradcraft.nn.module import Module, ModuleDict, ModuleList, Parameter
from gradcraft.ops.function import no_grad
from gradcraft.tensor import Tensor

_cache_enabled = 0
_cache: dict = {}


@contextlib.contextmanager
def cached():
    """Within the block, a parametrized tensor is computed once per read-out and reused."""
    global _cache_enabled
    _cache_enabled += 1
    try:
        yield
    finally:
        _cache_enabled -= 1
        if not _cache_enabled:
            _cache.clear()


def _register(module: Module, name: str, value) -> None:
    if isinstance(value, Parameter):
        module.register_parameter(name, value)
    else:
        module.register_buffer(name, value)


class ParametrizationList(ModuleList):
    """The parametrizations of one tensor, applied in order, and the original tensor(s) they read."""

    def __init__(self, modules, original: Tensor, unsafe: bool = False) -> None:
        super().__init__(modules)
        self.unsafe = unsafe
        with no_grad():
            new = original
            for module in reversed(list(self)):
                if hasattr(module, "right_inverse"):
                    new = module.right_inverse(new)
        if not isinstance(new, (Tensor, Sequence)):
            raise ValueError(
                f"'right_inverse' must return a Tensor or a Sequence of tensors (list, tuple...). Got {type(new)}"
            )
        self.is_tensor = isinstance(new, Tensor)
        self.ntensors = 1 if self.is_tensor else len(new)
        if self.is_tensor:
            if new is not original:
                with no_grad():
                    original.copy_(new)  # the same tensor object, so an optimizer holding it keeps working
            _register(self, "original", original)
        else:
            for i, originali in enumerate(new):
                if not isinstance(originali, Tensor):
                    raise ValueError(
                        f"'right_inverse' must return a sequence of tensors. Got element {i} of type {type(originali)}"
                    )
                if isinstance(original, Parameter):
                    originali = Parameter(originali.detach(), original.requires_grad)
                _register(self, f"original{i}", originali)

    def right_inverse(self, value: Tensor) -> None:
        """Set the original tensor(s) from a value of the parametrized tensor."""
        with no_grad():
            for module in reversed(list(self)):
                if hasattr(module, "right_inverse"):
                    value = module.right_inverse(value)
                elif not self.unsafe:
                    raise RuntimeError(f"parametrization {type(module).__name__} does not implement right_inverse.")
            if self.is_tensor:
                self.original.copy_(value)
            else:
                for i, tensor in enumerate(value):
                    getattr(self, f"original{i}").copy_(tensor)

    def forward(self):
        modules = list(self)
        if self.is_tensor:
            x = modules[0](self.original)
        else:
            x = modules[0](*(getattr(self, f"original{i}") for i in range(self.ntensors)))
        for module in modules[1:]:
            x = module(x)
        return x


def _inject_new_class(module: Module, name: str | None = None) -> None:
    cls = module.__class__
    module.__class__ = type(name or f"Parametrized{cls.__name__}", (cls,), {"__module__": cls.__module__})


def _inject_property(module: Module, tensor_name: str) -> None:
    def get_parametrized(self):
        parametrization = self.parametrizations[tensor_name]
        if _cache_enabled:
            key = (id(self), tensor_name)
            if key not in _cache:
                _cache[key] = parametrization()
            return _cache[key]
        return parametrization()

    def set_original(self, value) -> None:
        self.parametrizations[tensor_name].right_inverse(value)

    setattr(module.__class__, tensor_name, property(get_parametrized, set_original))


def is_parametrized(module: Module, tensor_name: str | None = None) -> bool:
    parametrizations = module.__dict__.get("parametrizations")
    if parametrizations is None or not isinstance(parametrizations, ModuleDict):
        return False
    if tensor_name is None:
        return len(parametrizations) > 0
    return tensor_name in parametrizations


def type_before_parametrizations(module: Module) -> type:
    return module.__class__.__bases__[0] if is_parametrized(module) else type(module)


def register_parametrization(module: Module, tensor_name: str, parametrization: Module, *, unsafe: bool = False):
    parametrization.train(module.training)
    if is_parametrized(module, tensor_name):
        module.parametrizations[tensor_name].append(parametrization)
        module.parametrizations[tensor_name].unsafe |= unsafe
    elif tensor_name in module._buffers or tensor_name in module._parameters:
        original = getattr(module, tensor_name)
        parametrizations = ParametrizationList([parametrization], original, unsafe=unsafe)
        delattr(module, tensor_name)
        if not is_parametrized(module):
            _inject_new_class(module)
            module.parametrizations = ModuleDict()
        _inject_property(module, tensor_name)
        module.parametrizations[tensor_name] = parametrizations
    else:
        raise ValueError(
            f"Module '{module}' does not have a parameter, a buffer, or a parametrized element with name "
            f"'{tensor_name}'"
        )
    return module


def remove_parametrizations(module: Module, tensor_name: str, leave_parametrized: bool = True):
    """Make `tensor_name` a plain parameter (or buffer) again: its current value, or with
    leave_parametrized=False its original tensor."""
    if not is_parametrized(module, tensor_name):
        raise ValueError(f"Module {module} does not have a parametrization on {tensor_name}")
    parametrizations = module.parametrizations[tensor_name]
    if parametrizations.is_tensor:
        original = parametrizations.original
        if leave_parametrized:
            with no_grad():
                original.copy_(getattr(module, tensor_name))
    else:
        if not leave_parametrized:
            raise ValueError(
                "Cannot leave unparametrized (`leave_parametrized=False`) a tensor that is parametrized in terms of "
                "a sequence of tensors."
            )
        t = getattr(module, tensor_name)
        original = Parameter(t.detach(), t.requires_grad) if t.requires_grad else t.detach()
    delattr(module.__class__, tensor_name)
    del module.parametrizations[tensor_name]
    _register(module, tensor_name, original)
    if not is_parametrized(module):
        delattr(module, "parametrizations")
        module.__class__ = module.__class__.__bases__[0]
    return module
