"""Type aliases for the public API's hints: what each kind of argument accepts.

Only annotations use them (the modules that do import them with `from __future__ import annotations`),
so they cost nothing at run time and import nothing above the dtypes.
"""

from typing import TYPE_CHECKING, Union

import numpy as np

from gradcraft.dtypes import DType

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor

Number = int | float | bool
TensorOrNumber = Union["Tensor", int, float, bool]  # noqa: UP007 (a forward reference); an operand: a tensor, or a Python number broadcast to it
DTypeLike = DType | str | np.dtype | None  # gradcraft.float32, "float32", "bf16", np.float32's dtype
Device = str | None  # "cpu", "cuda", "cuda:1"; None: the default (or the input's)
Dims = int | tuple[int, ...] | list[int] | None  # a dimension, several, or None for all
Shape = int | tuple[int, ...] | list[int]
