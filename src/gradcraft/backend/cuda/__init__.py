"""The CUDA backend: CuPy arrays as buffers, cuBLAS matmuls, handwritten kernels compiled by NVRTC.

    create_backend(index)  the registry's factory (gradcraft.device); a UserError without CuPy or a GPU
    set_tf32(enabled)      float32 matmuls on TF32 tensor cores (also: GRADCRAFT_TF32=1 in the environment)
    memory_info(index=0)   CuPy memory-pool counters: used_bytes, total_bytes (held by the pool), free_bytes

See docs/cuda.md.
"""

from gradcraft.errors import UserError


def _cupy():
    try:
        import cupy
    except ImportError:
        raise UserError(
            "the cuda device needs CuPy: pip install 'gradcraft[cuda]' on a machine with an NVIDIA GPU"
        ) from None
    return cupy


def create_backend(index: int = 0):
    cupy = _cupy()
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as error:  # no driver, no device, driver too old for this CuPy
        raise UserError(
            f"no usable NVIDIA GPU for device 'cuda:{index}' ({type(error).__name__}: "
            f"{str(error).strip()}); use device='cpu'"
        ) from None
    if not 0 <= index < count:
        raise UserError(f"device 'cuda:{index}' does not exist: this machine has {count} CUDA device(s)")
    from gradcraft.backend.cuda.backend import CUDABackend

    return CUDABackend(index)


def set_tf32(enabled: bool) -> None:
    """Let float32 matmuls use TF32 tensor cores (about 1e-3 relative error, several times faster)."""
    _cupy()
    from gradcraft.backend.cuda import matmul

    matmul.set_tf32(enabled)


def memory_info(index: int = 0) -> dict:
    """Counters of CuPy's default memory pool, where every CUDA buffer of gradcraft lives."""
    cupy = _cupy()
    with cupy.cuda.Device(index):
        pool = cupy.get_default_memory_pool()
        return {"used_bytes": pool.used_bytes(), "total_bytes": pool.total_bytes(), "free_bytes": pool.free_bytes()}
