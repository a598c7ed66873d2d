"""What a dtype is, and how two dtypes combine (type promotion).

A `DType` names a scalar type and knows its NumPy equivalent (bfloat16 comes
from ml_dtypes, since NumPy has none). Promotion follows PyTorch: bool < integer
< floating; within floats the wider wins, and float16 with bfloat16 gives
float32. Python scalars are "weak": `x * 2` keeps x's dtype, `int_tensor * 0.5`
becomes the default float dtype.
"""

from dataclasses import dataclass

import ml_dtypes
import numpy as np


@dataclass(frozen=True, eq=False)
class DType:
    name: str
    np: np.dtype
    itemsize: int
    kind: str  # "b" bool, "u" unsigned int, "i" signed int, "f" floating
    rank: int  # position within its kind, for promotion

    @property
    def is_floating_point(self) -> bool:
        return self.kind == "f"

    # One instance per dtype (below; unpickling returns it too), so equality is mostly identity: every
    # op compares dtypes, and a dataclass's field-by-field comparison was a visible share of an op's cost.
    def __eq__(self, other) -> bool:
        if self is other:
            return True
        return self.name == other.name if isinstance(other, DType) else NotImplemented

    def __hash__(self) -> int:
        return hash(self.name)

    def __reduce__(self):
        return to_dtype, (self.name,)

    def __repr__(self) -> str:
        return f"torch.{self.name}"  # as PyTorch prints it (`import gradcraft as torch` programs print dtypes)


bool_ = DType("bool", np.dtype(np.bool_), 1, "b", 0)
uint8 = DType("uint8", np.dtype(np.uint8), 1, "u", 0)
int32 = DType("int32", np.dtype(np.int32), 4, "i", 2)
int64 = DType("int64", np.dtype(np.int64), 8, "i", 3)
float16 = DType("float16", np.dtype(np.float16), 2, "f", 0)
bfloat16 = DType("bfloat16", np.dtype(ml_dtypes.bfloat16), 2, "f", 0)
float32 = DType("float32", np.dtype(np.float32), 4, "f", 2)
float64 = DType("float64", np.dtype(np.float64), 8, "f", 3)

ALL = (bool_, uint8, int32, int64, float16, bfloat16, float32, float64)
_BY_NAME = {d.name: d for d in ALL}
_BY_NAME.update(
    {
        "float": float32,
        "double": float64,
        "half": float16,
        "long": int64,
        "int": int32,
        "bf16": bfloat16,
        "fp32": float32,
        "fp16": float16,
        "fp64": float64,
    }
)
_BY_NP = {d.np: d for d in ALL}

default_float = float32
default_int = int64


def set_default_dtype(d: "DType | str | np.dtype", /) -> None:
    """The floating-point dtype of factories and Python floats (torch.set_default_dtype)."""
    global default_float
    dtype = to_dtype(d)
    if not dtype.is_floating_point:
        raise TypeError("only floating-point types are supported as the default type")
    default_float = dtype


def get_default_dtype() -> "DType":
    return default_float


def to_dtype(x) -> DType:
    """Accept a DType, a name ("float32", "bf16"), a NumPy dtype, or a torch-like dtype string."""
    if isinstance(x, DType):
        return x
    if isinstance(x, str):
        key = x.removeprefix("torch.").removeprefix("gradcraft.")
        if key in _BY_NAME:
            return _BY_NAME[key]
        raise ValueError(f"unknown dtype {x!r}; use one of {', '.join(d.name for d in ALL)}")
    if x is bool:
        return bool_
    if x is int:
        return default_int
    if x is float:
        return default_float
    try:
        return _BY_NP[np.dtype(x)]
    except (TypeError, KeyError):
        raise ValueError(f"unsupported dtype {x!r}; use one of {', '.join(d.name for d in ALL)}") from None


_KIND_ORDER = {"b": 0, "u": 1, "i": 1, "f": 2}


def promote_types(type1: DType, type2: DType) -> DType:
    """The dtype of a binary op between tensors of dtypes a and b (PyTorch rules)."""
    if type1 == type2:
        return type1
    ka, kb = _KIND_ORDER[type1.kind], _KIND_ORDER[type2.kind]
    if ka != kb:
        return type1 if ka > kb else type2
    if type1.kind == "f":
        if {type1, type2} == {float16, bfloat16}:
            return float32
        return type1 if type1.rank > type2.rank else type2
    # integers: uint8 with a signed int promotes to the signed one (or int16, which we lack -> int32)
    if type1.kind == "u":
        return type2 if type2.rank > 1 else int32
    if type2.kind == "u":
        return type1 if type1.rank > 1 else int32
    return type1 if type1.rank > type2.rank else type2


def scalar_result_dtype(t: DType, scalar) -> DType:
    """The dtype of `tensor op python_scalar`: the scalar only lifts the category."""
    if isinstance(scalar, bool):
        return t
    if isinstance(scalar, int):
        return t if t.kind != "b" else default_int
    if isinstance(scalar, float):
        return t if t.is_floating_point else default_float
    raise TypeError(f"unsupported scalar {scalar!r}")
