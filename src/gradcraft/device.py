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
# device type -> module of its collective communication for process groups (gradcraft/distributed):
# check_nccl(), available_devices(), unique_id() and NCCLGroup(rank, world, uid, index)
_COLLECTIVE_MODULES = {"cuda": "gradcraft.backend.cuda.nccl"}


_default_device = "cpu"  # what None means: set_default_device

# Copies between the host and a device since the process started (the backends count them; `paused`
# while `uncounted_transfers` is active): a compiled step function asks whether it made any
# (gradcraft/compiled_step.py), since a replay would not make them again.
transfers = {"count": 0, "paused": 0}


def count_transfer() -> None:
    if not transfers["paused"]:
        transfers["count"] += 1


class uncounted_transfers:
    """Within: copies that are not the caller's step's own (an optimizer's host side, which a
    compiled step runs again before every replay)."""

    def __enter__(self):
        transfers["paused"] += 1

    def __exit__(self, *exc):
        transfers["paused"] -= 1


def set_default_device(device: str | None) -> None:
    """The device of tensors made without `device=` (torch.set_default_device); None means the CPU."""
    global _default_device
    _default_device = "cpu" if device is None else canonical(device)


def get_default_device() -> str:
    return _default_device


def canonical(device) -> str:
    """Normalise a device spec: "cpu" -> "cpu", "cuda" -> "cuda:0", None -> the default device (the CPU
    unless `set_default_device` chose another)."""
    if device is None:
        return _default_device
    name = str(device)
    if name == "cuda":
        return "cuda:0"
    kind, _, index = name.partition(":")
    if kind not in _BACKEND_MODULES or (index and not index.isdigit()) or (kind == "cpu" and index not in ("", "0")):
        raise UserError(f"unknown device {name!r}; {_device_hint(name)}")
    return "cpu" if kind == "cpu" else f"{kind}:{int(index or 0)}"


def _device_hint(name: str) -> str:
    """What to write instead of a wrong device string (the common slips get a suggestion of their own)."""
    from gradcraft import dtypes

    plain = "use cpu, cuda or cuda:N"
    lowered = name.lower().strip()
    if lowered in ("cpu", "cuda") or lowered.startswith("cuda:"):
        return f"device names are lower case: did you mean {lowered!r}? ({plain})"
    if lowered in ("gpu", "nvidia", "gpu:0") or lowered.startswith("gpu:"):
        return f"an NVIDIA GPU is 'cuda' (or 'cuda:N'); {plain}"
    if lowered in ("fp16", "bf16", "fp32", "half") or isinstance(getattr(dtypes, lowered, None), dtypes.DType):
        return f"{name!r} is a number type, not a device (the precision flag is --dtype); {plain}"
    return plain


def parse_device(name, require_available: bool = True) -> str:
    """The device named on a command line, canonical ("cpu", "cuda:N"), checked: a wrong name or a
    CUDA device this machine cannot use is a UserError (one line), raised before any work starts."""
    device = canonical(name)
    if require_available and device != "cpu" and not is_available(device):
        raise UserError(f"device {device} is not usable here (CuPy and an NVIDIA GPU are needed); use --device cpu")
    return device


def get_backend(device: str):
    """The backend object for a canonical device string, created on first use."""
    backend = _backends.get(device)
    if backend is None:
        kind, _, index = device.partition(":")
        module = importlib.import_module(_BACKEND_MODULES[kind])
        backend = module.create_backend(int(index or 0))
        _backends[device] = backend
    return backend


def collectives(device: str):
    """The collective-communication module of a device's type (NCCL for cuda), imported on first use:
    distributed/ reaches the backend's process groups through here, not by importing backend/."""
    kind = device.partition(":")[0]
    if kind not in _COLLECTIVE_MODULES:
        raise UserError(f"device {device!r} has no collective library for process groups; use cuda or a TCP group")
    return importlib.import_module(_COLLECTIVE_MODULES[kind])


def is_available(kind: str = "cuda") -> bool:
    """True when a device of this type can be used here."""
    if kind == "cpu":
        return True
    try:
        get_backend(canonical(kind))
        return True
    except Exception:
        return False
