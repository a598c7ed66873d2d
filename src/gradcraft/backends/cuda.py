"""torch.backends.cuda: `matmul.allow_tf32` (gradcraft's TF32 switch) and the cuBLAS reduction flags;
gradcraft's float16/bfloat16 products accumulate in float32 always, so the
reduced-precision-reduction flags are accepted and kept, with no effect."""

from __future__ import annotations

from gradcraft.backend import tf32

_REDUCTION_FLAGS = (
    "allow_fp16_reduced_precision_reduction",
    "allow_bf16_reduced_precision_reduction",
    "allow_fp16_accumulation",
)


class cuBLASModule:
    """`matmul`: attribute reads and writes, as PyTorch's; an unknown name is an AttributeError."""

    def __init__(self):
        object.__setattr__(
            self,
            "_flags",
            {
                "allow_fp16_reduced_precision_reduction": True,
                "allow_bf16_reduced_precision_reduction": True,
                "allow_fp16_accumulation": False,
            },
        )

    def __getattr__(self, name):
        if name == "allow_tf32":
            return tf32.is_enabled()
        if name == "fp32_precision":
            return "tf32" if tf32.is_enabled() else "ieee"
        if name in _REDUCTION_FLAGS:
            return self._flags[name]
        raise AttributeError(f"Unknown attribute {name}")

    def __setattr__(self, name, value):
        if name == "allow_tf32":
            tf32.set_enabled(bool(value))  # "high" as get_float32_matmul_precision's name, as PyTorch
        elif name == "fp32_precision":
            if value not in ("tf32", "ieee", "none"):
                raise RuntimeError(f"fp32_precision must be 'tf32', 'ieee' or 'none', got {value!r}")
            tf32.set_enabled(value == "tf32")
        elif name in _REDUCTION_FLAGS:
            self._flags[name] = value
        else:
            raise AttributeError(f"Unknown attribute {name}")


matmul = cuBLASModule()


def is_built() -> bool:
    """Whether this gradcraft can run on CUDA (its CUDA backend needs CuPy)."""
    import importlib.util

    return importlib.util.find_spec("cupy") is not None
