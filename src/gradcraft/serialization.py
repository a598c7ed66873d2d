"""gradcraft.save / gradcraft.load: state dicts (and other nested containers of tensors) in one file.

The file is a safetensors file: every tensor (and NumPy array) of the object is a named entry, and
the object's structure (dicts with their key types, lists, tuples, numbers, strings, None) is JSON in
the header's metadata, with each tensor replaced by a reference to its entry. So a model's
state_dict, an optimizer's, a scheduler's, or a dict holding all three and the step count round-trip;
unlike torch.save, nothing is pickled, so loading a file runs no code. Writes are atomic.

    gc.save({"model": model.state_dict(), "step": 10}, "ckpt.gc")
    state = gc.load("ckpt.gc"); model.load_state_dict(state["model"])

Any other object (a whole nn.Module, an instance of the user's class) is pickled instead, as
torch.save does, its tensors stored as arrays beside the pickle. As in PyTorch >= 2.6, `load` reads
such a file only with `weights_only=False` (unpickling can run any code the file names); with the
default `weights_only=True` it unpickles only containers, tensors and the classes allowed through
`add_safe_globals`, and refuses the rest with one line naming the option.
"""

from __future__ import annotations

from typing import Any, BinaryIO
from gradcraft.typing import Device

import builtins
import collections
import io
import json
import os
import pickle
import struct

import numpy as np
from safetensors.numpy import save as safetensors_save

from gradcraft import dtypes
from gradcraft.errors import UserError

_STRUCTURE_KEY = "gradcraft.structure"
# NumPy types safetensors stores as they are; the half types travel as their bits (uint16).
_BITS = {dtypes.bfloat16.name: np.uint16}


# A pickled file starts with this line; the rest is pickle's (protocol 4) bytes.
_PICKLE_MAGIC = b"GRADCRAFT-PICKLE-1\n"


class _SaveError(UserError, pickle.PicklingError):
    """An object pickle cannot store (a lambda, a local class, an open file)."""


class _NotPlain(Exception):
    """obj holds something that is not a tensor, array, number, string or container: pickle it."""


def save(
    obj: Any,
    f: str | os.PathLike | BinaryIO,
    pickle_module: Any = pickle,
    pickle_protocol: int = 2,
    _use_new_zipfile_serialization: bool = True,
    _disable_byteorder_record: bool = False,
) -> None:
    """Write obj to f (a path or a binary file object): containers of tensors, arrays, numbers and
    strings as a safetensors file, anything else (a whole module) pickled."""
    arrays: dict = {}
    try:
        structure = _encode(obj, arrays)
        data = safetensors_save(arrays, metadata={_STRUCTURE_KEY: json.dumps(structure)})
    except _NotPlain:
        data = _PICKLE_MAGIC + _pickled(obj)
    if isinstance(f, (str, os.PathLike)):
        from gradcraft.atomic import write_bytes

        write_bytes(os.fspath(f), data)
    else:
        f.write(data)


def load(
    f: str | os.PathLike | BinaryIO,
    map_location: Device = None,
    pickle_module: Any = None,
    *,
    weights_only: bool | None = None,
    mmap: bool | None = None,
    **pickle_load_args: Any,
) -> Any:
    """Read what `save` wrote; tensors come back on map_location (default: the CPU). A pickled file
    needs weights_only=False unless it holds only containers, tensors and allowed classes."""
    if isinstance(f, (str, os.PathLike)):
        try:
            with open(f, "rb") as handle:
                data = handle.read()
        except OSError as e:
            raise UserError(f"cannot read {os.fspath(f)}: {e.strerror}; check the path") from None
    else:
        data = f.read() if not isinstance(f, (bytes, bytearray)) else bytes(f)
    if data.startswith(_PICKLE_MAGIC):
        return _unpickled(data[len(_PICKLE_MAGIC) :], map_location, weights_only is not False)
    header, arrays = _read(data, f)
    structure = header.get("__metadata__", {}).get(_STRUCTURE_KEY)
    if structure is None:  # a plain safetensors file (e.g. model weights): its tensors by name
        return {name: _tensor(array, None, map_location) for name, array in arrays.items()}
    return _decode(json.loads(structure), arrays, map_location)


def _read(data: bytes, source):
    from safetensors.numpy import load as safetensors_load

    name = os.fspath(source) if isinstance(source, (str, os.PathLike)) else "the file"
    try:
        (size,) = struct.unpack("<Q", data[:8])
        header = json.loads(data[8 : 8 + size])
        return header, safetensors_load(data)
    except Exception:
        raise UserError(
            f"{name} is not a file written by gradcraft.save (or a safetensors file); "
            "check that it is complete and the right file"
        ) from None


def _encode(obj, arrays: dict):
    from gradcraft.tensor import Tensor

    if isinstance(obj, Tensor):
        key = f"t{len(arrays)}"
        array = obj.detach().numpy()
        if obj.dtype.name in _BITS:
            array = array.view(_BITS[obj.dtype.name])
        arrays[key] = np.ascontiguousarray(array)
        return {"__tensor__": key, "dtype": obj.dtype.name, "requires_grad": bool(obj.requires_grad)}
    if isinstance(obj, dtypes.DType):
        return {"__dtype__": obj.name}
    if isinstance(obj, np.ndarray):
        key = f"t{len(arrays)}"
        arrays[key] = np.ascontiguousarray(obj)
        return {"__array__": key}
    if isinstance(obj, dict):
        return {"__dict__": [[_encode_key(k), _encode(v, arrays)] for k, v in obj.items()]}
    if isinstance(obj, tuple):
        return {"__tuple__": [_encode(v, arrays) for v in obj]}
    if isinstance(obj, list):
        return [_encode(v, arrays) for v in obj]
    if isinstance(obj, np.generic):
        return obj.item()
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise _NotPlain


def _encode_key(key):
    if isinstance(key, (str, int, float, bool)) or key is None:
        return key
    raise _NotPlain


def _decode(node, arrays: dict, device):
    if isinstance(node, list):
        return [_decode(v, arrays, device) for v in node]
    if isinstance(node, dict):
        if "__tensor__" in node:
            return _tensor(arrays[node["__tensor__"]], node, device)
        if "__array__" in node:
            return arrays[node["__array__"]]
        if "__dtype__" in node:
            return dtypes.to_dtype(node["__dtype__"])
        if "__tuple__" in node:
            return tuple(_decode(v, arrays, device) for v in node["__tuple__"])
        if "__dict__" in node:
            return {k: _decode(v, arrays, device) for k, v in node["__dict__"]}
    return node


def _tensor(array, info, device):
    from gradcraft.tensor import Tensor

    dtype = dtypes.to_dtype(info["dtype"]) if info else dtypes.to_dtype(array.dtype)
    if dtype.name in _BITS:
        array = array.view(dtype.np)
    if isinstance(device, dict):  # torch's {"cuda:0": "cpu"} form
        device = next(iter(device.values()), None)
    t = Tensor(array, dtype=dtype, device=str(device) if device is not None else None)
    if info and info.get("requires_grad"):
        t.requires_grad = True
    return t


# ------------------------------------------------------------ pickled objects

_SAFE_GLOBALS: dict = {}
_ALLOWED = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("builtins", "complex"): complex,
    ("builtins", "slice"): slice,
    ("builtins", "bytearray"): bytearray,
}


def add_safe_globals(safe_globals: list) -> None:
    """Classes (or functions) that load(weights_only=True) may unpickle, as torch.serialization's."""
    for entry in safe_globals:
        obj = entry[0] if isinstance(entry, tuple) else entry
        _SAFE_GLOBALS[(obj.__module__, obj.__qualname__)] = obj


def get_safe_globals() -> list:
    return list(_SAFE_GLOBALS.values())


def clear_safe_globals() -> None:
    _SAFE_GLOBALS.clear()


class safe_globals:
    """Within the block, load(weights_only=True) may also unpickle these."""

    def __init__(self, safe_globals: list):
        self._globals = safe_globals

    def __enter__(self):
        self._saved = dict(_SAFE_GLOBALS)
        add_safe_globals(self._globals)

    def __exit__(self, *exc):
        _SAFE_GLOBALS.clear()
        _SAFE_GLOBALS.update(self._saved)


def _pickled(obj) -> bytes:
    """obj pickled, each tensor replaced by a reference to one entry of a table of arrays (a tensor
    referenced twice, as tied weights are, is one entry and comes back as one tensor)."""
    from gradcraft.tensor import Tensor

    table: list = []
    index: dict = {}

    class Pickler(pickle.Pickler):
        def persistent_id(self, value):
            if not isinstance(value, Tensor):
                return None
            if id(value) not in index:
                array = np.ascontiguousarray(value.detach().numpy())
                if value.dtype.name in _BITS:
                    array = array.view(_BITS[value.dtype.name])
                kind = type(value)
                table.append((array, value.dtype.name, bool(value.requires_grad), kind.__module__, kind.__qualname__))
                index[id(value)] = (len(table) - 1, value)  # (the tensor kept alive: ids stay unique)
            return ("tensor", index[id(value)][0])

    body = io.BytesIO()
    try:
        Pickler(body, protocol=4).dump(obj)
    except (pickle.PicklingError, AttributeError, TypeError) as e:
        raise _SaveError(f"gradcraft.save cannot store this object: {e}") from None
    return pickle.dumps((table, body.getvalue()), protocol=4)


def _refused(module: str, name: str) -> pickle.UnpicklingError:
    return pickle.UnpicklingError(
        f"Weights only load failed: the file needs {module}.{name}, which weights_only=True does not unpickle; "
        "if you trust the file, pass weights_only=False to load (unpickling can run arbitrary code), or allow "
        "the class with gradcraft.serialization.add_safe_globals([...])"
    )


def _unpickled(data: bytes, device, weights_only: bool):
    from gradcraft.tensor import Tensor

    class TableUnpickler(pickle.Unpickler):
        def find_class(self, module, name):
            return _table_class(module, name)

    table, body = TableUnpickler(io.BytesIO(data)).load()
    tensors: dict = {}

    class Unpickler(pickle.Unpickler):
        def find_class(self, module, name):
            if (module, name) in _ALLOWED:
                return _ALLOWED[(module, name)]
            if (module, name) in _SAFE_GLOBALS:
                return _SAFE_GLOBALS[(module, name)]
            if not weights_only:
                return super().find_class(module, name)
            if module == "builtins" and name in ("dict", "list", "tuple", "int", "float", "str", "bool", "bytes"):
                return getattr(builtins, name)
            if (module, name) in (
                ("gradcraft.tensor", "Tensor"),
                ("gradcraft.nn.module", "Parameter"),
                ("gradcraft.dtypes", "to_dtype"),  # (a dtype by its name)
            ):
                return super().find_class(module, name)
            raise _refused(module, name)

        def persistent_load(self, pid):
            i = pid[1]
            if i not in tensors:
                array, dtype_name, requires_grad, module, qualname = table[i]
                t = _tensor(array, {"dtype": dtype_name, "requires_grad": False}, device)
                kind = self.find_class(module, qualname)
                if kind is not Tensor:
                    t = kind(t, requires_grad=requires_grad) if _takes_requires_grad(kind) else kind(t)
                elif requires_grad:
                    t.requires_grad = True
                tensors[i] = t
            return tensors[i]

    return Unpickler(io.BytesIO(body)).load()


def _table_class(module, name):
    """The table of arrays holds only NumPy arrays, dtypes and plain values: nothing else is unpickled."""
    if (
        module in ("numpy", "numpy.core.multiarray", "numpy._core.multiarray", "numpy.dtypes")
        and name in ("ndarray", "_reconstruct", "dtype", "scalar")
        or (module == "numpy.dtypes" and name.endswith("DType"))
    ):
        return getattr(__import__(module, fromlist=[name]), name)
    raise pickle.UnpicklingError(f"unexpected {module}.{name} in a gradcraft.save file's table of arrays")


def _takes_requires_grad(kind) -> bool:
    import inspect

    try:
        return "requires_grad" in inspect.signature(kind).parameters
    except (TypeError, ValueError):
        return False
