"""torch.optim.swa_utils: stochastic weight averaging and EMA of a model's weights.

AveragedModel keeps a deep copy of the model and folds the model's parameters into it with
`update_parameters` (the running mean by default, or an EMA / a user's avg_fn); SWALR anneals each
group's learning rate to swa_lr; update_bn recomputes BatchNorm statistics with one pass over the data.
The arithmetic is PyTorch's: mean += (p - mean) / (n + 1) as a lerp, EMA as lerp by 1 - decay."""

from __future__ import annotations

import itertools
import math
from copy import deepcopy

from gradcraft import dtypes
from gradcraft.nn.module import Module
from gradcraft.ops.creation import tensor
from gradcraft.ops.function import no_grad
from gradcraft.optim.lr_scheduler import LRScheduler, _per_group


def get_ema_multi_avg_fn(decay=0.999):
    """An exponential moving average over lists of tensors, in place: ema += (1 - decay) * (p - ema)."""

    @no_grad()
    def ema_update(ema_param_list, current_param_list, _):
        for p_ema, p_model in zip(ema_param_list, current_param_list):
            if p_ema.dtype.is_floating_point:
                p_ema.lerp_(p_model, 1 - decay)
            else:
                p_ema.copy_(p_ema * decay + p_model * (1 - decay))

    return ema_update


def get_swa_multi_avg_fn():
    """The running mean over lists of tensors, in place: avg += (p - avg) / (n + 1)."""

    @no_grad()
    def swa_update(averaged_param_list, current_param_list, num_averaged):
        n = float(num_averaged.item()) if hasattr(num_averaged, "item") else float(num_averaged)
        for p_avg, p_model in zip(averaged_param_list, current_param_list):
            if p_avg.dtype.is_floating_point:
                p_avg.lerp_(p_model, 1 / (n + 1))
            else:
                p_avg.add_((p_model - p_avg) / (n + 1))

    return swa_update


def get_ema_avg_fn(decay=0.999):
    @no_grad()
    def ema_update(ema_param, current_param, num_averaged):
        return decay * ema_param + (1 - decay) * current_param

    return ema_update


def get_swa_avg_fn():
    @no_grad()
    def swa_update(averaged_param, current_param, num_averaged):
        return averaged_param + (current_param - averaged_param) / (num_averaged + 1)

    return swa_update


class AveragedModel(Module):
    """A copy of `model` whose parameters (and buffers, with use_buffers=True) are averaged by
    update_parameters; calling it runs the copy."""

    def __init__(self, model, device=None, avg_fn=None, multi_avg_fn=None, use_buffers=False) -> None:
        super().__init__()
        if avg_fn is not None and multi_avg_fn is not None:
            raise AssertionError("Only one of avg_fn and multi_avg_fn should be provided")
        self.module = deepcopy(model)
        if device is not None:
            self.module = self.module.to(device)
        self.register_buffer("n_averaged", tensor(0, dtype=dtypes.int64, device=device))
        self.avg_fn = avg_fn
        self.multi_avg_fn = multi_avg_fn
        self.use_buffers = use_buffers

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    @no_grad()
    def update_parameters(self, model) -> None:
        if self.use_buffers:
            self_params = list(itertools.chain(self.module.parameters(), self.module.buffers()))
            model_params = list(itertools.chain(model.parameters(), model.buffers()))
        else:
            self_params, model_params = list(self.parameters()), list(model.parameters())
        averaged = [p.detach() for p in self_params]
        current = [p.detach().to(a.device) for p, a in zip(model_params, averaged)]
        n = int(self.n_averaged.item())
        if n == 0:
            for p_avg, p_model in zip(averaged, current):
                p_avg.copy_(p_model)
        elif self.multi_avg_fn is not None or self.avg_fn is None:
            update = self.multi_avg_fn or get_swa_multi_avg_fn()
            update(averaged, current, self.n_averaged)
        else:
            for p_avg, p_model in zip(averaged, current):
                p_avg.copy_(self.avg_fn(p_avg, p_model, self.n_averaged.to(p_avg.device)))
        if not self.use_buffers:
            # without averaging the buffers, keep them in sync with the source model
            for b_swa, b_model in zip(self.module.buffers(), model.buffers()):
                b_swa.detach().copy_(b_model.detach().to(b_swa.device))
        self.n_averaged += 1


@no_grad()
def update_bn(loader, model, device=None) -> None:
    """Reset the BatchNorm layers' running statistics and recompute them (a cumulative average) with
    one forward pass over `loader` (its items' first element, or the "input" key of a dict)."""
    from gradcraft.nn.instancenorm import _InstanceNorm
    from gradcraft.nn.normalization import _BatchNorm

    momenta = {}
    for module in model.modules():
        if isinstance(module, _BatchNorm) and not isinstance(module, _InstanceNorm):
            module.reset_running_stats()
            momenta[module] = module.momentum
    if not momenta:
        return
    was_training = model.training
    model.train()
    for module in momenta:
        module.momentum = None
    for input in loader:
        if isinstance(input, (list, tuple)):
            input = input[0]
        if isinstance(input, dict):
            input = input["input"]
        if device is not None:
            input = input.to(device)
        model(input)
    for module, momentum in momenta.items():
        module.momentum = momentum
    model.train(was_training)


class SWALR(LRScheduler):
    """Anneals each group's lr from its current value to swa_lr over anneal_epochs steps ('cos' or
    'linear'), then holds it."""

    def __init__(self, optimizer, swa_lr, anneal_epochs=10, anneal_strategy="cos", last_epoch=-1) -> None:
        for lr, group in zip(_per_group(swa_lr, optimizer, "swa_lr"), optimizer.param_groups):
            group["swa_lr"] = lr
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"anneal_strategy must by one of 'cos' or 'linear', instead got {anneal_strategy}")
        self.anneal_strategy = anneal_strategy
        if not isinstance(anneal_epochs, int) or anneal_epochs < 0:
            raise ValueError(f"anneal_epochs must be equal or greater than 0, got {anneal_epochs}")
        self.anneal_epochs = anneal_epochs
        super().__init__(optimizer, last_epoch)

    def anneal_func(self, t: float) -> float:
        return t if self.anneal_strategy == "linear" else (1 - math.cos(math.pi * t)) / 2

    @staticmethod
    def _get_initial_lr(lr, swa_lr, alpha):
        if alpha == 1:
            return swa_lr
        return (lr - alpha * swa_lr) / (1 - alpha)

    def get_lr(self) -> list:
        step = self._step_count - 1
        if self.anneal_epochs == 0:
            step = max(1, step)
        prev_alpha = self.anneal_func(max(0, min(1, (step - 1) / max(1, self.anneal_epochs))))
        groups = self.optimizer.param_groups
        prev_lrs = [self._get_initial_lr(g["lr"], g["swa_lr"], prev_alpha) for g in groups]
        alpha = self.anneal_func(max(0, min(1, step / max(1, self.anneal_epochs))))
        return [g["swa_lr"] * alpha + lr * (1 - alpha) for g, lr in zip(groups, prev_lrs)]
