"""The CUDA backend (CuPy arrays, cuBLAS, NVRTC kernels). Not written yet: see the CUDA backend issue."""

from gradcraft.errors import UserError


def create_backend(index: int = 0):
    try:
        import cupy  # noqa: F401
    except ImportError:
        raise UserError("the cuda device needs CuPy: pip install 'gradcraft[cuda]' on a machine with an NVIDIA GPU") \
            from None
    raise UserError("the cuda backend is not implemented yet in this version of gradcraft; use device='cpu'")
