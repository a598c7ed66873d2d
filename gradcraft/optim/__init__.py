"""Optimizers (SGD, AdamW), gradient clipping and learning-rate schedules."""

from gradcraft.optim.clip import clip_grad_norm_, grad_norm_and_scale  # noqa: F401
from gradcraft.optim.optimizer import SGD, AdamW, Optimizer  # noqa: F401
from gradcraft.optim.schedule import Constant, CosineWithWarmup, LinearWithWarmup  # noqa: F401
# PyTorch's optimizers and schedulers by their torch.optim names (SGD here adds dampening and Nesterov).
from gradcraft.optim import lr_scheduler  # noqa: F401,E402
from gradcraft.optim.adaptive import SGD, Adagrad, Adam, RMSprop  # noqa: F401,E402,F811
