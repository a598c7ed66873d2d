"""The process's TF32 switch: whether float32 matrix products may run on TF32 tensor cores (10-bit
mantissa inputs, float32 accumulation). Read by the CUDA matmuls (backend/cuda/matmul.py, linear.py)
at each product; set by GRADCRAFT_TF32=1, `gradcraft.backend.cuda.set_tf32`, and PyTorch's names
(`gradcraft.backends.cuda.matmul.allow_tf32`, `gradcraft.set_float32_matmul_precision`). Kept apart
from the CUDA backend so that it can be read and set on a machine without CuPy."""

import os

enabled = os.environ.get("GRADCRAFT_TF32", "0") == "1"
precision = "high"  # torch.get_float32_matmul_precision()'s name for "on": "high" or "medium"


def set_enabled(flag: bool, name: str = "high") -> None:
    global enabled, precision
    enabled = bool(flag)
    if enabled:
        precision = name


def is_enabled() -> bool:
    return enabled
