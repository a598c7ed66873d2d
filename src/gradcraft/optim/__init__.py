"""Optimizers (SGD, AdamW, Adam, ...), gradient clipping and learning-rate schedules, by torch.optim's names."""

from gradcraft.optim import lr_scheduler  # noqa: F401
from gradcraft.optim.adaptive import SGD, Adagrad, Adam, RMSprop  # noqa: F401 (SGD with dampening and Nesterov)
from gradcraft.optim.adaptive_more import Adadelta, Adamax, NAdam, RAdam  # noqa: F401
from gradcraft.optim.clip import clip_grad_norm_, grad_norm_and_scale  # noqa: F401
from gradcraft.optim.lbfgs import LBFGS  # noqa: F401
from gradcraft.optim.optimizer import AdamW, Optimizer  # noqa: F401
from gradcraft.optim.lr_schedule import Constant, CosineWithWarmup, LinearWithWarmup  # noqa: F401
from gradcraft.optim import swa_utils  # noqa: F401,E402  (torch.optim.swa_utils: AveragedModel, SWALR, update_bn)
from gradcraft.optim import lr_scheduler_cyclic as _cyclic  # noqa: E402

# torch.optim.lr_scheduler's cyclic schedules, defined in their own file
lr_scheduler.CosineAnnealingWarmRestarts = _cyclic.CosineAnnealingWarmRestarts
lr_scheduler.CyclicLR, lr_scheduler.ChainedScheduler = _cyclic.CyclicLR, _cyclic.ChainedScheduler
