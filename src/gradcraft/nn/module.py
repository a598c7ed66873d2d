"""Module and Parameter: the containers models are built from, as in PyTorch.

A Module registers the Parameters and sub-Modules assigned to its attributes
(and the tensors given to `register_buffer`), so `named_parameters()`,
`state_dict()` and `load_state_dict()` find them by dotted name
("blocks.0.attn.qkv.weight"). `print(model)` shows the tree as PyTorch does.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from collections import OrderedDict

import numpy as np

from gradcraft.errors import UserError
from gradcraft.tensor import Tensor, init_alias


class Parameter(Tensor):
    """A realized leaf tensor that requires grad. (Which parameters get weight decay is decided in
    one place, gradcraft/optim/weight_decay.py.)"""

    __slots__ = ()

    def __init__(self, data: Tensor | None, requires_grad: bool = True) -> None:
        if isinstance(data, Tensor):
            init_alias(self, data)  # the same memory
        else:
            super().__init__(data)
        self.requires_grad = requires_grad

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()


class _Parameters(list):
    """The list `parameters()` returns, which `next()` also reads from the start, as it would
    PyTorch's generator (`next(model.parameters()).device`)."""

    def __next__(self):
        position = self.__dict__.setdefault("_next", 0)
        if position >= len(self):
            raise StopIteration
        self._next = position + 1
        return self[position]


class Module:
    def __init__(self) -> None:
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_non_persistent", set())
        object.__setattr__(self, "training", True)

    def __setattr__(self, name, value):
        if "_parameters" not in self.__dict__:
            raise RuntimeError(f"{type(self).__name__}.__init__ must call super().__init__() before assigning {name}")
        self._parameters.pop(name, None)
        self._modules.pop(name, None)
        if isinstance(value, Parameter):
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._modules[name] = value
        elif name in self._buffers:
            if value is not None and not isinstance(value, Tensor):
                raise UserError(f"buffer {name!r} can only be set to a tensor or None, got {type(value).__name__}")
            self._buffers[name] = value
        object.__setattr__(self, name, value)

    def __delattr__(self, name):
        """`del module.name` unregisters a parameter, buffer or submodule, as in PyTorch."""
        for store in (self._parameters, self._buffers, self._modules):
            store.pop(name, None)
        self._non_persistent.discard(name)
        if name in self.__dict__:
            del self.__dict__[name]
        else:
            object.__delattr__(self, name)

    def register_buffer(self, name: str, tensor, persistent: bool = True) -> None:
        """A tensor that belongs to the module's state (saved, moved by .to()) but is not a parameter."""
        if tensor is not None and not isinstance(tensor, Tensor):
            raise UserError(f"register_buffer({name!r}) needs a tensor or None, got {type(tensor).__name__}")
        self._parameters.pop(name, None)
        self._modules.pop(name, None)
        self._buffers[name] = tensor.realize() if tensor is not None else None
        if not persistent:
            self._non_persistent.add(name)
        object.__setattr__(self, name, self._buffers[name])

    def register_parameter(self, name: str, param) -> None:
        setattr(self, name, param)

    def add_module(self, name: str, module) -> None:
        setattr(self, name, module)

    register_module = add_module

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} has no forward() method; define one")

    def __call__(self, *args, **kwargs):
        if "_hooked" in self.__dict__:  # a forward or backward hook was registered (gradcraft/nn/hooks.py)
            return _hooks.call(self, args, kwargs)
        return self.forward(*args, **kwargs)

    # ------------------------------------------------------------ traversal

    def named_modules(self, prefix: str = ""):
        yield prefix, self
        for name, module in self._modules.items():
            yield from module.named_modules(f"{prefix}.{name}" if prefix else name)

    def modules(self):
        return (m for _, m in self.named_modules())

    def children(self):
        return iter(self._modules.values())

    def named_children(self):
        return iter(self._modules.items())

    def named_buffers(self, prefix: str = ""):
        for module_name, module in self.named_modules(prefix):
            for name, b in module._buffers.items():
                if b is not None:
                    yield (f"{module_name}.{name}" if module_name else name), b

    def buffers(self):
        return (b for _, b in self.named_buffers())

    def apply(self, fn) -> Module:
        """fn(module) for every sub-module and then this one (as in PyTorch, e.g. for weight init)."""
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        for p in self.parameters():
            p.requires_grad = requires_grad
        return self

    def named_parameters(self, prefix: str = ""):
        seen = set()
        for module_name, module in self.named_modules(prefix):
            for name, p in module._parameters.items():
                if id(p) not in seen:  # tied weights appear once, under their first name
                    seen.add(id(p))
                    yield (f"{module_name}.{name}" if module_name else name), p

    def parameters(self, recurse: bool = True):
        if not recurse:
            return _Parameters(self._parameters.values())
        return _Parameters(p for _, p in self.named_parameters())

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    # ------------------------------------------------------------ modes and devices

    def train(self, mode: bool = True) -> Module:
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self) -> Module:
        return self.train(False)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.parameters():
            p.grad = None

    def to(self, *args, **kwargs) -> Module:
        """Move or cast every parameter and buffer in place (the objects, and so optimizer references,
        stay). As in PyTorch, a dtype applies to floating-point tensors only."""
        for t in list(self.parameters()) + list(self.buffers()):
            if not t.dtype.is_floating_point:
                devices = [a for a in args if isinstance(a, str)] + ([kwargs["device"]] if "device" in kwargs else [])
                if not devices:
                    continue
                moved = Tensor.to(t.detach(), devices[0]).realize()
            else:
                moved = Tensor.to(t.detach(), *args, **kwargs).realize()
            t.data = moved  # the same object, now on the new device or dtype
            t.grad = None
        return self

    def cpu(self) -> Module:
        return self.to("cpu")

    def cuda(self, device: int = 0) -> Module:
        return self.to(f"cuda:{device}")

    def float(self) -> Module:
        from gradcraft import dtypes

        return self.to(dtypes.float32)

    def double(self) -> Module:
        from gradcraft import dtypes

        return self.to(dtypes.float64)

    def half(self) -> Module:
        from gradcraft import dtypes

        return self.to(dtypes.float16)

    def bfloat16(self) -> Module:
        from gradcraft import dtypes

        return self.to(dtypes.bfloat16)

    # ------------------------------------------------------------ printing

    def extra_repr(self) -> str:
        """The text between the parentheses of this module's line in `print(model)` (override it)."""
        return ""

    def _get_name(self) -> str:
        return type(self).__name__

    def __repr__(self) -> str:
        # PyTorch's layout: "Name(extra)" or "Name(\n  (child): ...\n)".
        extra = self.extra_repr()
        extra_lines = extra.split("\n") if extra else []
        child_lines = [f"({name}): {_indent(repr(module), 2)}" for name, module in self._modules.items()]
        return _module_repr(self._get_name(), extra_lines, child_lines)

    # ------------------------------------------------------------ state

    def _named_state(self) -> OrderedDict[str, Tensor]:
        """Every parameter and persistent buffer object by dotted name, in PyTorch's order (a module's
        own parameters, then its buffers, then its children's; tied parameters under every name)."""
        state = OrderedDict()
        for module_name, module in self.named_modules():
            prefix = f"{module_name}." if module_name else ""
            for name, p in module._parameters.items():
                state[prefix + name] = p
            for name, b in module._buffers.items():
                if b is not None and name not in module._non_persistent:
                    state[prefix + name] = b
        return state

    def state_dict(self, keep_vars: bool = False) -> OrderedDict[str, Tensor]:
        """The parameters and persistent buffers by dotted name. As in PyTorch, each entry shares
        memory with the module's tensor but is cut from autograd (keep_vars=True: the objects)."""
        state = self._named_state()
        return state if keep_vars else OrderedDict((k, v.data) for k, v in state.items())

    def load_state_dict(self, state: dict, strict: bool = True) -> None:
        own = self._named_state()
        missing = [k for k in own if k not in state]
        unexpected = [k for k in state if k not in own]
        if strict and (missing or unexpected):
            parts = []
            if missing:
                parts.append(f"missing {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}")
            if unexpected:
                parts.append(f"unexpected {', '.join(unexpected[:5])}{' ...' if len(unexpected) > 5 else ''}")
            raise UserError(f"weights do not match the model: {'; '.join(parts)}")
        for name, p in own.items():
            if name not in state:
                continue
            value = state[name]
            array = value.numpy() if isinstance(value, Tensor) else np.asarray(value)
            if tuple(array.shape) != p.shape:
                raise UserError(
                    f"weights do not match the model: {name} has shape {tuple(array.shape)}, "
                    f"the model expects {p.shape}"
                )
            loaded = Tensor(array, dtype=p.dtype, device=p.device)
            p.data = loaded


class ModuleList(Module):
    def __init__(self, modules: Iterable[Module] | None = ()) -> None:
        super().__init__()
        for i, m in enumerate(modules):
            setattr(self, str(i), m)

    def append(self, module: Module) -> ModuleList:
        setattr(self, str(len(self._modules)), module)
        return self

    def extend(self, modules) -> ModuleList:
        for m in modules:
            self.append(m)
        return self

    def __getitem__(self, i):
        if isinstance(i, slice):
            return type(self)(list(self._modules.values())[i])
        return list(self._modules.values())[i]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __repr__(self) -> str:
        # As PyTorch (2.x): a run of equal children is one line, "(0-2): 3 x Linear(...)".
        children = [(name, repr(m)) for name, m in self._modules.items()]
        lines, i = [], 0
        while i < len(children):
            j = i
            while j + 1 < len(children) and children[j + 1][1] == children[i][1]:
                j += 1
            text = _indent(children[i][1], 2)
            if j > i:
                lines.append(f"({children[i][0]}-{children[j][0]}): {j - i + 1} x {text}")
            else:
                lines.append(f"({children[i][0]}): {text}")
            i = j + 1
        return _module_repr(self._get_name(), [], lines)


class Sequential(Module):
    """Modules applied in order: Sequential(a, b, c) or Sequential(OrderedDict(name=module, ...))."""

    def __init__(self, *modules: Module) -> None:
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], (OrderedDict, dict)):
            for name, m in modules[0].items():
                setattr(self, name, m)
            return
        if len(modules) == 1 and isinstance(modules[0], (list, tuple)):  # (gradcraft's earlier form)
            modules = tuple(modules[0])
        for i, m in enumerate(modules):
            setattr(self, str(i), m)

    def append(self, module: Module) -> Sequential:
        setattr(self, str(len(self._modules)), module)
        return self

    def __getitem__(self, i):
        if isinstance(i, slice):
            return Sequential(OrderedDict(list(self._modules.items())[i]))
        return list(self._modules.values())[i]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def forward(self, input: Any) -> Any:
        for m in self:
            input = m(input)
        return input


class ModuleDict(Module):
    def __init__(self, modules: dict[str, Module] | None = None) -> None:
        super().__init__()
        for name, m in (dict(modules) if modules else {}).items():
            setattr(self, name, m)

    def __getitem__(self, name: str) -> Module:
        return self._modules[name]

    def __setitem__(self, name: str, module: Module) -> None:
        setattr(self, name, module)

    def __delitem__(self, name: str) -> None:
        delattr(self, name)

    def pop(self, key: str) -> Module:
        module = self[key]
        del self[key]
        return module

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def __contains__(self, name) -> bool:
        return name in self._modules

    def keys(self):
        return self._modules.keys()

    def values(self):
        return self._modules.values()

    def items(self):
        return self._modules.items()


def _indent(text: str, spaces: int) -> str:
    lines = text.split("\n")
    return lines[0] if len(lines) == 1 else "\n".join([lines[0]] + [" " * spaces + line for line in lines[1:]])


def _module_repr(name: str, extra_lines: list, child_lines: list) -> str:
    lines = extra_lines + child_lines
    body = ""
    if lines:
        body = extra_lines[0] if len(extra_lines) == 1 and not child_lines else "\n  " + "\n  ".join(lines) + "\n"
    return f"{name}({body})"


from gradcraft.nn import hooks as _hooks  # noqa: E402  (Module's hooks; it imports autograd.Function)

_hooks.attach(Module)
