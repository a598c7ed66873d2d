"""Module and Parameter: the containers models are built from, as in PyTorch.

A Module registers the Parameters and sub-Modules assigned to its attributes,
so `named_parameters()`, `state_dict()` and `load_state_dict()` find them by
dotted name ("blocks.0.attn.qkv.weight").
"""

from collections import OrderedDict

import numpy as np

from gradcraft.errors import UserError
from gradcraft.tensor import Tensor


class Parameter(Tensor):
    """A realized leaf tensor that requires grad. (Which parameters get weight decay is decided in
    one place, gradcraft/optim/weight_decay.py.)"""

    __slots__ = ()

    def __init__(self, data, requires_grad: bool = True):
        if isinstance(data, Tensor):
            data = data.realize()
            self._init(data.shape, data.dtype, data.device, False)
            self._buf = data._buf
        else:
            super().__init__(data)
        self.requires_grad = requires_grad

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()


class Module:
    def __init__(self):
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
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
        object.__setattr__(self, name, value)

    def forward(self, *args, **kwargs):
        raise NotImplementedError

    def __call__(self, *args, **kwargs):
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

    def named_parameters(self, prefix: str = ""):
        seen = set()
        for module_name, module in self.named_modules(prefix):
            for name, p in module._parameters.items():
                if id(p) not in seen:  # tied weights appear once, under their first name
                    seen.add(id(p))
                    yield (f"{module_name}.{name}" if module_name else name), p

    def parameters(self):
        return [p for _, p in self.named_parameters()]

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    # ------------------------------------------------------------ modes and devices

    def train(self, mode: bool = True) -> "Module":
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self) -> "Module":
        return self.train(False)

    def zero_grad(self) -> None:
        for p in self.parameters():
            p.grad = None

    def to(self, *args, **kwargs) -> "Module":
        """Move or cast every parameter in place (parameter objects, and so optimizer references, stay)."""
        for p in self.parameters():
            moved = Tensor.to(p.detach(), *args, **kwargs).realize()
            p._buf, p.dtype, p.device = moved._buf, moved.dtype, moved.device
            p._version += 1
            p.grad = None
        return self

    # ------------------------------------------------------------ state

    def state_dict(self) -> "OrderedDict[str, Tensor]":
        """Every parameter by dotted name (tied parameters appear under every name they have)."""
        state = OrderedDict()
        for module_name, module in self.named_modules():
            for name, p in module._parameters.items():
                state[f"{module_name}.{name}" if module_name else name] = p
        return state

    def load_state_dict(self, state: dict, strict: bool = True) -> None:
        own = self.state_dict()
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
                raise UserError(f"weights do not match the model: {name} has shape {tuple(array.shape)}, "
                                f"the model expects {p.shape}")
            loaded = Tensor(array, dtype=p.dtype, device=p.device)
            p._buf = loaded._buf
            p._version += 1


class ModuleList(Module):
    def __init__(self, modules=()):
        super().__init__()
        for i, m in enumerate(modules):
            setattr(self, str(i), m)

    def append(self, module: Module) -> "ModuleList":
        setattr(self, str(len(self._modules)), module)
        return self

    def __getitem__(self, i):
        return list(self._modules.values())[i]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())


class Sequential(ModuleList):
    def forward(self, x):
        for m in self:
            x = m(x)
        return x
