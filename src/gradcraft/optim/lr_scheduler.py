"""torch.optim.lr_scheduler: schedulers that set each parameter group's "lr" once per `step()`.

Same names, arguments and numbers as PyTorch. Each scheduler here is written in closed form (the
learning rate at step t from the group's initial learning rate); PyTorch updates some of them
recursively from the previous value, which is the same formula up to floating-point rounding.
As in PyTorch, constructing a scheduler applies the learning rate of step 0, and the first
scheduler on an optimizer records each group's starting lr as "initial_lr".
"""

import bisect
import math

from gradcraft.errors import UserError
from gradcraft.optim.optimizer import stepped_on_host


class LRScheduler:
    def __init__(self, optimizer, last_epoch: int = -1):
        self.optimizer = optimizer
        for group in optimizer.param_groups:
            if last_epoch == -1:
                group.setdefault("initial_lr", group["lr"])
            elif "initial_lr" not in group:
                raise UserError(
                    "param 'initial_lr' is not specified in param_groups when resuming a scheduler (last_epoch != -1)"
                )
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = last_epoch
        self._step_count = 0
        self.step()

    def lr_at(self, base_lr: float, epoch: int, group_index: int) -> float:
        raise NotImplementedError

    def get_lr(self) -> list:
        return [self.lr_at(base, self.last_epoch, i) for i, base in enumerate(self.base_lrs)]

    def step(self, epoch: int | None = None) -> None:
        stepped_on_host(f"{type(self).__name__}.step")
        self._step_count += 1
        self.last_epoch = self.last_epoch + 1 if epoch is None else epoch
        for group, lr in zip(self.optimizer.param_groups, self.get_lr()):
            group["lr"] = lr
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def get_last_lr(self) -> list:
        return self._last_lr

    def state_dict(self) -> dict:
        return {
            k: v
            for k, v in self.__dict__.items()
            if k != "optimizer" and not callable(v) and not (isinstance(v, list) and any(callable(x) for x in v))
        }

    def load_state_dict(self, state: dict) -> None:
        self.__dict__.update(state)


_LRScheduler = LRScheduler


def _per_group(value, optimizer, name: str) -> list:
    if isinstance(value, (list, tuple)):
        if len(value) != len(optimizer.param_groups):
            raise UserError(f"expected {len(optimizer.param_groups)} values for {name}, got {len(value)}")
        return list(value)
    return [value] * len(optimizer.param_groups)


class LambdaLR(LRScheduler):
    """lr = initial_lr * lr_lambda(step)."""

    def __init__(self, optimizer, lr_lambda, last_epoch: int = -1):
        self.lr_lambdas = _per_group(lr_lambda, optimizer, "lr_lambda")
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr, epoch, i):
        return base_lr * self.lr_lambdas[i](epoch)


class MultiplicativeLR(LRScheduler):
    """lr = lr * lr_lambda(step) after each step (a running product, as PyTorch)."""

    def __init__(self, optimizer, lr_lambda, last_epoch: int = -1):
        self.lr_lambdas = _per_group(lr_lambda, optimizer, "lr_lambda")
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch > 0:
            return [group["lr"] * f(self.last_epoch) for group, f in zip(self.optimizer.param_groups, self.lr_lambdas)]
        return [group["lr"] for group in self.optimizer.param_groups]


class StepLR(LRScheduler):
    def __init__(self, optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1):
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr, epoch, i):
        return base_lr * self.gamma ** (epoch // self.step_size)


class MultiStepLR(LRScheduler):
    def __init__(self, optimizer, milestones, gamma: float = 0.1, last_epoch: int = -1):
        self.milestones, self.gamma = sorted(milestones), gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr, epoch, i):
        return base_lr * self.gamma ** bisect.bisect_right(self.milestones, epoch)


class ExponentialLR(LRScheduler):
    def __init__(self, optimizer, gamma: float, last_epoch: int = -1):
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr, epoch, i):
        return base_lr * self.gamma**epoch


class ConstantLR(LRScheduler):
    def __init__(self, optimizer, factor: float = 1.0 / 3, total_iters: int = 5, last_epoch: int = -1):
        self.factor, self.total_iters = factor, total_iters
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr, epoch, i):
        return base_lr * (self.factor if epoch < self.total_iters else 1.0)


class LinearLR(LRScheduler):
    """The factor goes linearly from start_factor to end_factor over total_iters steps."""

    def __init__(
        self,
        optimizer,
        start_factor: float = 1.0 / 3,
        end_factor: float = 1.0,
        total_iters: int = 5,
        last_epoch: int = -1,
    ):
        if not 0 < start_factor <= 1 or not 0 <= end_factor <= 1:
            raise UserError("LinearLR: start_factor must be in (0, 1] and end_factor in [0, 1]")
        self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, total_iters
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr, epoch, i):
        progress = min(self.total_iters, epoch) / self.total_iters
        return base_lr * (self.start_factor + (self.end_factor - self.start_factor) * progress)


class CosineAnnealingLR(LRScheduler):
    """eta_min + (initial_lr - eta_min) * (1 + cos(pi * t / T_max)) / 2."""

    def __init__(self, optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1):
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr, epoch, i):
        return self.eta_min + (base_lr - self.eta_min) * (1 + math.cos(math.pi * epoch / self.T_max)) / 2


class PolynomialLR(LRScheduler):
    def __init__(self, optimizer, total_iters: int = 5, power: float = 1.0, last_epoch: int = -1):
        self.total_iters, self.power = total_iters, power
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr, epoch, i):
        return base_lr * (1.0 - min(self.total_iters, epoch) / self.total_iters) ** self.power


class OneCycleLR(LRScheduler):
    """Warm up from max_lr/div_factor to max_lr, then anneal to max_lr/(div_factor*final_div_factor);
    momentum (or Adam's beta1) cycles the other way between max_momentum and base_momentum."""

    def __init__(
        self,
        optimizer,
        max_lr,
        total_steps: int | None = None,
        epochs: int | None = None,
        steps_per_epoch: int | None = None,
        pct_start: float = 0.3,
        anneal_strategy: str = "cos",
        cycle_momentum: bool = True,
        base_momentum=0.85,
        max_momentum=0.95,
        div_factor: float = 25.0,
        final_div_factor: float = 1e4,
        three_phase: bool = False,
        last_epoch: int = -1,
    ):
        if total_steps is None:
            if epochs is None or steps_per_epoch is None:
                raise UserError("OneCycleLR needs total_steps, or epochs and steps_per_epoch")
            total_steps = epochs * steps_per_epoch
        if anneal_strategy not in ("cos", "linear"):
            raise UserError(f"OneCycleLR: anneal_strategy must be 'cos' or 'linear', got {anneal_strategy!r}")
        self.total_steps, self.anneal_strategy, self.cycle_momentum = total_steps, anneal_strategy, cycle_momentum
        p = float(pct_start * total_steps)
        if three_phase:
            self._phases = [
                (p - 1, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                (2 * p - 2, "max_lr", "initial_lr", "base_momentum", "max_momentum"),
                (total_steps - 1, "initial_lr", "min_lr", "max_momentum", "max_momentum"),
            ]
        else:
            self._phases = [
                (p - 1, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                (total_steps - 1, "max_lr", "min_lr", "base_momentum", "max_momentum"),
            ]
        max_lrs = _per_group(max_lr, optimizer, "max_lr")
        if last_epoch == -1:
            for group, lr in zip(optimizer.param_groups, max_lrs):
                group["initial_lr"] = lr / div_factor
                group["max_lr"] = lr
                group["min_lr"] = group["initial_lr"] / final_div_factor
        self._use_betas = False
        if cycle_momentum:
            first = optimizer.param_groups[0]
            if "momentum" not in first and "betas" not in first:
                raise UserError("optimizer must support momentum or beta1 with `cycle_momentum` enabled")
            self._use_betas = "betas" in first
            for group, low, high in zip(
                optimizer.param_groups,
                _per_group(base_momentum, optimizer, "base_momentum"),
                _per_group(max_momentum, optimizer, "max_momentum"),
            ):
                if last_epoch == -1:
                    if self._use_betas:
                        group["betas"] = (high, *group["betas"][1:])
                    else:
                        group["momentum"] = high
                group["max_momentum"], group["base_momentum"] = high, low
        super().__init__(optimizer, last_epoch)

    def _anneal(self, start, end, pct):
        if self.anneal_strategy == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def get_lr(self):
        step = self.last_epoch
        if step > self.total_steps:
            raise UserError(f"OneCycleLR stepped {step} times, more than total_steps={self.total_steps}")
        lrs = []
        for group in self.optimizer.param_groups:
            start_step = 0.0
            for i, (end_step, lr_from, lr_to, m_from, m_to) in enumerate(self._phases):
                if step <= end_step or i == len(self._phases) - 1:
                    pct = (step - start_step) / (end_step - start_step)
                    lr = self._anneal(group[lr_from], group[lr_to], pct)
                    momentum = self._anneal(group[m_from], group[m_to], pct) if self.cycle_momentum else None
                    break
                start_step = end_step
            lrs.append(lr)
            if self.cycle_momentum:
                if self._use_betas:
                    group["betas"] = (momentum, *group["betas"][1:])
                else:
                    group["momentum"] = momentum
        return lrs


class SequentialLR(LRScheduler):
    """One scheduler after another: schedulers[i] from milestone i-1 on (restarted at its step 0)."""

    def __init__(self, optimizer, schedulers, milestones, last_epoch: int = -1):
        if len(milestones) != len(schedulers) - 1:
            raise UserError(
                f"SequentialLR expects {len(schedulers) - 1} milestones for {len(schedulers)} schedulers, "
                f"got {len(milestones)}"
            )
        self.optimizer, self._schedulers, self._milestones = optimizer, list(schedulers), list(milestones)
        self.last_epoch = last_epoch + 1
        for group in optimizer.param_groups:
            group["lr"] = group["initial_lr"]
        for scheduler in self._schedulers:  # undo the step each made when it was built
            scheduler.last_epoch -= 1
        self._schedulers[0].step()  # ... and make the first one's step 0 again
        self._schedulers[0]._step_count -= 1
        self._last_lr = self._schedulers[0].get_last_lr()

    def step(self, epoch=None) -> None:
        stepped_on_host(f"{type(self).__name__}.step")
        self.last_epoch += 1
        index = bisect.bisect_right(self._milestones, self.last_epoch)
        scheduler = self._schedulers[index]
        if index > 0 and self._milestones[index - 1] == self.last_epoch:
            scheduler.step(0)
        else:
            scheduler.step()
        self._last_lr = scheduler.get_last_lr()


class ReduceLROnPlateau:
    """Multiply the lr by `factor` when the metric passed to step(metric) has not improved for more
    than `patience` steps (PyTorch's rules for mode, threshold, cooldown and min_lr)."""

    def __init__(
        self,
        optimizer,
        mode: str = "min",
        factor: float = 0.1,
        patience: int = 10,
        threshold: float = 1e-4,
        threshold_mode: str = "rel",
        cooldown: int = 0,
        min_lr=0.0,
        eps: float = 1e-8,
    ):
        if factor >= 1.0:
            raise UserError("ReduceLROnPlateau: factor should be < 1.0")
        if mode not in ("min", "max") or threshold_mode not in ("rel", "abs"):
            raise UserError("ReduceLROnPlateau: mode must be 'min' or 'max' and threshold_mode 'rel' or 'abs'")
        self.optimizer, self.mode, self.factor, self.patience = optimizer, mode, factor, patience
        self.threshold, self.threshold_mode, self.cooldown, self.eps = threshold, threshold_mode, cooldown, eps
        self.min_lrs = _per_group(min_lr, optimizer, "min_lr")
        self.best = math.inf if mode == "min" else -math.inf
        self.num_bad_epochs = self.cooldown_counter = self.last_epoch = 0
        self._last_lr = [group["lr"] for group in optimizer.param_groups]

    def _is_better(self, a: float) -> bool:
        if self.mode == "min":
            return a < (
                self.best * (1 - self.threshold) if self.threshold_mode == "rel" else self.best - self.threshold
            )
        return a > (self.best * (1 + self.threshold) if self.threshold_mode == "rel" else self.best + self.threshold)

    def step(self, metrics) -> None:
        stepped_on_host(f"{type(self).__name__}.step")
        current = float(metrics)
        self.last_epoch += 1
        if self._is_better(current):
            self.best, self.num_bad_epochs = current, 0
        else:
            self.num_bad_epochs += 1
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            for group, min_lr in zip(self.optimizer.param_groups, self.min_lrs):
                new = max(group["lr"] * self.factor, min_lr)
                if group["lr"] - new > self.eps:
                    group["lr"] = new
            self.cooldown_counter, self.num_bad_epochs = self.cooldown, 0
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def get_last_lr(self) -> list:
        return self._last_lr
