"""PyTorch's `torch.utils` names: `gradcraft.utils.data` (datasets, samplers, DataLoader) and
`gradcraft.utils.tensorboard` (SummaryWriter, imported on use: it needs the tensorboard package)."""

from gradcraft.utils import data  # noqa: F401
