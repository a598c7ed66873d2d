"""torch.amp: automatic mixed precision. `autocast` (gradcraft/amp/autocast_mode.py) runs each op in
the dtype of PyTorch's op policy (gradcraft/amp/policy.py); `GradScaler` (gradcraft/amp/grad_scaler.py)
scales float16 losses and skips steps whose gradients overflowed. See docs/pytorch.md."""

from gradcraft.amp.autocast_mode import autocast, is_autocast_available
from gradcraft.amp.grad_scaler import GradScaler

__all__ = ["GradScaler", "autocast", "is_autocast_available"]
