"""PyTorch's `torch.utils` names: `gradcraft.utils.data` (datasets, samplers, DataLoader)."""

from gradcraft.utils import data  # noqa: F401
