"""gradcraft.save / gradcraft.load: state dicts (and other nested containers of tensors) in one file.

The file is a safetensors file: every tensor (and NumPy array) of the object is a named entry, and
the object's structure (dicts with their key types, lists, tuples, numbers, strings, None) is JSON in
the header's metadata, with each tensor replaced by a reference to its entry. So a model's
state_dict, an optimizer's, a scheduler's, or a dict holding all three and the step count round-trip;
unlike torch.save, nothing is pickled, so loading a file runs no code. Writes are atomic.

    gc.save({"model": model.state_dict(), "step": 10}, "ckpt.gc")
    state = gc.load("ckpt.gc"); model.load_state_dict(state["model"])
"""

from __future__ import annotations

from typing import Any, BinaryIO
from gradcraft.typing import Device

import json
import os
import struct

import numpy as np
from safetensors.numpy import save as safetensors_save

from gradcraft import dtypes
from gradcraft.errors import UserError

_STRUCTURE_KEY = "gradcraft.structure"
# NumPy types safetensors stores as they are; the half types travel as their bits (uint16).
_BITS = {dtypes.bfloat16.name: np.uint16}


def save(obj: Any, f: str | os.PathLike | BinaryIO) -> None:
    """Write obj (tensors, arrays, and dicts/lists/tuples/numbers/strings/None around them) to f (a path
    or a binary file object)."""
    arrays: dict = {}
    structure = _encode(obj, arrays)
    data = safetensors_save(arrays, metadata={_STRUCTURE_KEY: json.dumps(structure)})
    if isinstance(f, (str, os.PathLike)):
        from gradcraft.atomic import write_bytes

        write_bytes(os.fspath(f), data)
    else:
        f.write(data)


def load(f: str | os.PathLike | BinaryIO, map_location: Device = None, weights_only: bool = True) -> Any:
    """Read what `save` wrote; tensors come back on map_location (default: the CPU)."""
    if isinstance(f, (str, os.PathLike)):
        try:
            with open(f, "rb") as handle:
                data = handle.read()
        except OSError as e:
            raise UserError(f"cannot read {os.fspath(f)}: {e.strerror}; check the path") from None
    else:
        data = f.read() if not isinstance(f, (bytes, bytearray)) else bytes(f)
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
    raise UserError(
        f"gradcraft.save cannot store a {type(obj).__name__}; save tensors, arrays, numbers, strings "
        "and dicts/lists/tuples of them (e.g. model.state_dict())"
    )


def _encode_key(key):
    if isinstance(key, (str, int, float, bool)) or key is None:
        return key
    raise UserError(f"gradcraft.save: dict keys must be strings or numbers, got a {type(key).__name__}")


def _decode(node, arrays: dict, device):
    if isinstance(node, list):
        return [_decode(v, arrays, device) for v in node]
    if isinstance(node, dict):
        if "__tensor__" in node:
            return _tensor(arrays[node["__tensor__"]], node, device)
        if "__array__" in node:
            return arrays[node["__array__"]]
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
