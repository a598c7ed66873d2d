"""torch.backends: the precision switches a PyTorch script sets, under PyTorch's names.

    gradcraft.backends.cuda.matmul.allow_tf32 = True     # float32 matmuls on TF32 tensor cores
    gradcraft.set_float32_matmul_precision("high")       # the same switch
    gradcraft.backends.cudnn.allow_tf32 = True           # accepted (cuDNN serves convolutions, which gradcraft has not)

`matmul.allow_tf32` and `set_float32_matmul_precision` set the one TF32 switch of gradcraft's CUDA
matmuls (gradcraft/backend/tf32.py, also GRADCRAFT_TF32=1): "highest" is off, "high" and "medium"
on ("medium" also lets PyTorch use bfloat16 internally; gradcraft uses TF32 for it too).
"""

from __future__ import annotations

import warnings

from gradcraft.backend import tf32
from gradcraft.backends import cuda, cudnn, mps  # noqa: F401

_PRECISIONS = ("highest", "high", "medium")


def set_float32_matmul_precision(precision: str) -> None:
    """ "highest": float32 products in full float32; "high" / "medium": TF32 tensor cores allowed."""
    if precision not in _PRECISIONS:
        warnings.warn(
            f"{precision} is not one of 'highest', 'high', or 'medium'; the current setFloat32MatmulPrecision "
            "call has no effect.",
            stacklevel=2,
        )
        return
    tf32.set_enabled(precision != "highest", precision)


def get_float32_matmul_precision() -> str:
    return tf32.precision if tf32.is_enabled() else "highest"
