"""`default_collate` and `default_convert`, as `torch.utils.data`'s: a list of samples becomes one
batch of the same structure, tensors stacked along a new first dimension.

- tensors: `gradcraft.stack`; NumPy arrays and NumPy scalars: tensors of their dtype, stacked;
- Python floats: a float64 tensor; ints (and bools): an int64 (bool) tensor; strings stay a list;
- dicts: a dict of collated values per key; named tuples: the same type of collated fields;
- tuples and lists: collated position by position (a tuple gives a list, as in PyTorch).
"""

from __future__ import annotations

import collections.abc

import numpy as np

from gradcraft.errors import RuntimeError_, TypeError_

_UNSUPPORTED = "default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found {}"


def _tensor_class():
    from gradcraft.tensor import Tensor

    return Tensor


def _from_array(array: np.ndarray):
    from gradcraft import dtypes

    if array.dtype.kind in "SaUO":
        raise TypeError_(_UNSUPPORTED.format(array.dtype))
    return _tensor_class()(array, dtype=dtypes.to_dtype(array.dtype))


def _is_namedtuple(value) -> bool:
    return isinstance(value, tuple) and hasattr(value, "_fields")


def default_collate(batch):
    """One batch from a list of samples (see the module's docstring)."""
    from gradcraft.ops.movement import stack

    elem = batch[0]
    Tensor = _tensor_class()
    if isinstance(elem, Tensor):
        return stack(list(batch), 0)
    if type(elem).__module__ == "numpy" and not isinstance(elem, (np.str_, np.bytes_)):
        if isinstance(elem, np.ndarray):
            if elem.dtype.kind in "SaUO":
                raise TypeError_(_UNSUPPORTED.format(elem.dtype))
            return default_collate([_from_array(np.asarray(b)) for b in batch])
        if elem.shape == ():  # a NumPy scalar
            return _from_array(np.asarray(batch))
    if isinstance(elem, float):
        return _from_array(np.asarray(batch, dtype=np.float64))
    if isinstance(elem, int):
        return _from_array(np.asarray(batch, dtype=np.bool_ if isinstance(elem, bool) else np.int64))
    if isinstance(elem, (str, bytes)):
        return batch
    if isinstance(elem, collections.abc.Mapping):
        collated = {key: default_collate([d[key] for d in batch]) for key in elem}
        try:
            return type(elem)(collated)
        except TypeError:
            return collated
    if _is_namedtuple(elem):
        return type(elem)(*(default_collate(list(samples)) for samples in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        if any(len(sample) != len(elem) for sample in batch):
            raise RuntimeError_("each element in list of batch should be of equal size")
        columns = [default_collate(list(samples)) for samples in zip(*batch)]
        if isinstance(elem, tuple):
            return columns
        try:
            return type(elem)(columns)
        except TypeError:
            return columns
    raise TypeError_(_UNSUPPORTED.format(type(elem)))


def default_convert(data):
    """One sample made of tensors where it holds NumPy arrays (the DataLoader's `batch_size=None`
    path: no batching); everything else is returned as it is."""
    Tensor = _tensor_class()
    if isinstance(data, Tensor):
        return data
    if type(data).__module__ == "numpy" and not isinstance(data, (np.str_, np.bytes_)):
        if isinstance(data, np.ndarray):
            return data if data.dtype.kind in "SaUO" else _from_array(data)
        if data.shape == ():
            return _from_array(np.asarray(data))
    if isinstance(data, collections.abc.Mapping):
        converted = {key: default_convert(value) for key, value in data.items()}
        try:
            return type(data)(converted)
        except TypeError:
            return converted
    if _is_namedtuple(data):
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]
    if isinstance(data, collections.abc.Sequence) and not isinstance(data, (str, bytes)):
        try:
            return type(data)([default_convert(d) for d in data])
        except TypeError:
            return [default_convert(d) for d in data]
    return data
