"""torch.cuda.amp: the deprecated CUDA names of torch.amp (each warns FutureWarning, as PyTorch's)."""

from gradcraft.amp.autocast_mode import cuda_autocast as autocast
from gradcraft.amp.grad_scaler import CudaGradScaler as GradScaler

__all__ = ["GradScaler", "autocast"]
