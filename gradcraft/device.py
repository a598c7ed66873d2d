"""What a device is, and the registry that maps a device to its backend.

A device string is "cpu", "cuda" or "cuda:N". Backends register a factory by
device type; the CUDA backend is imported only when a CUDA tensor is made, so
`import gradcraft` needs neither CuPy nor a GPU.
"""

import importlib

from gradcraft.errors import UserError

# device type -> module that defines `create_backend(index)`
_BACKEND_MODULES = {"cpu": "gradcraft.backend.cpu", "cuda": "gradcraft.backend.cuda"}
_backends: dict[str, object] = {}


def canonical(device) -> str:
    """Normalise a device spec: None/"cpu" -> "cpu", "cuda" -> "cuda:0"."""
    if device is None:
        return "cpu"
    name = str(device)
    if name == "cuda":
        return "cuda:0"
    kind, _, index = name.partition(":")
    if kind not in _BACKEND_MODULES or (index and not index.isdigit()) or (kind == "cpu" and index not in ("", "0")):
        raise UserError(f"unknown device {name!r}; use 'cpu', 'cuda' or 'cuda:N'")
    return "cpu" if kind == "cpu" else f"{kind}:{int(index or 0)}"


def get_backend(device: str):
    """The backend object for a canonical device string, created on first use."""
    backend = _backends.get(device)
    if backend is None:
        kind, _, index = device.partition(":")
        module = importlib.import_module(_BACKEND_MODULES[kind])
        backend = module.create_backend(int(index or 0))
        _backends[device] = backend
    return backend


def is_available(kind: str = "cuda") -> bool:
    """True when a device of this type can be used here."""
    if kind == "cpu":
        return True
    try:
        get_backend(canonical(kind))
        return True
    except Exception:
        return False
