"""torch.optim.lr_scheduler's cyclic schedules: CosineAnnealingWarmRestarts (SGDR), CyclicLR (with
momentum cycled the other way), and ChainedScheduler (several schedulers stepped together, their
factors multiplied, as PyTorch's chainable updates compose)."""

from __future__ import annotations

import math

from gradcraft.optim.lr_scheduler import LRScheduler, _per_group
from gradcraft.optim.optimizer import stepped_on_host


class CosineAnnealingWarmRestarts(LRScheduler):
    """lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * T_cur / T_i)) / 2, T_cur restarting at 0 after
    T_i epochs and T_i growing by T_mult at each restart; `step(epoch)` takes fractional epochs."""

    def __init__(self, optimizer, T_0: int, T_mult: int = 1, eta_min: float = 0.0, last_epoch: int = -1) -> None:
        if T_0 <= 0 or not isinstance(T_0, int):
            raise ValueError(f"Expected positive integer T_0, but got {T_0}")
        if T_mult < 1 or not isinstance(T_mult, int):
            raise ValueError(f"Expected integer T_mult >= 1, but got {T_mult}")
        if not isinstance(eta_min, (float, int)):
            raise ValueError(f"Expected float or int eta_min, but got {eta_min} of type {type(eta_min)}")
        self.T_0, self.T_i, self.T_mult, self.eta_min, self.T_cur = T_0, T_0, T_mult, eta_min, last_epoch
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        cosine = (1 + math.cos(math.pi * self.T_cur / self.T_i)) / 2
        return [self.eta_min + (base_lr - self.eta_min) * cosine for base_lr in self.base_lrs]

    def step(self, epoch=None) -> None:
        stepped_on_host(f"{type(self).__name__}.step")
        self._step_count += 1
        if epoch is None and self.last_epoch < 0:
            epoch = 0
        if epoch is None:
            epoch = self.last_epoch + 1
            self.T_cur = self.T_cur + 1
            if self.T_cur >= self.T_i:
                self.T_cur = self.T_cur - self.T_i
                self.T_i = self.T_i * self.T_mult
        else:
            if epoch < 0:
                raise ValueError(f"Expected non-negative epoch, but got {epoch}")
            if epoch >= self.T_0:
                if self.T_mult == 1:
                    self.T_cur = epoch % self.T_0
                else:
                    n = int(math.log((epoch / self.T_0 * (self.T_mult - 1) + 1), self.T_mult))
                    self.T_cur = epoch - self.T_0 * (self.T_mult**n - 1) / (self.T_mult - 1)
                    self.T_i = self.T_0 * self.T_mult**n
            else:
                self.T_i = self.T_0
                self.T_cur = epoch
        self.last_epoch = math.floor(epoch)
        for group, lr in zip(self.optimizer.param_groups, self.get_lr()):
            group["lr"] = lr
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]


class CyclicLR(LRScheduler):
    """The learning rate goes from base_lr up to max_lr over step_size_up steps and back down over
    step_size_down, scaled per cycle ('triangular', 'triangular2', 'exp_range' or a scale_fn); with
    cycle_momentum, momentum (or Adam's beta1) goes from max_momentum down to base_momentum and back."""

    def __init__(
        self,
        optimizer,
        base_lr,
        max_lr,
        step_size_up: int = 2000,
        step_size_down: int | None = None,
        mode: str = "triangular",
        gamma: float = 1.0,
        scale_fn=None,
        scale_mode: str = "cycle",
        cycle_momentum: bool = True,
        base_momentum: float = 0.8,
        max_momentum: float = 0.9,
        last_epoch: int = -1,
    ) -> None:
        base_lrs = _per_group(base_lr, optimizer, "base_lr")
        if last_epoch == -1:
            for lr, group in zip(base_lrs, optimizer.param_groups):
                group["lr"] = lr
        self.max_lrs = _per_group(max_lr, optimizer, "max_lr")
        step_size_up = float(step_size_up)
        step_size_down = float(step_size_down) if step_size_down is not None else step_size_up
        self.total_size = step_size_up + step_size_down
        self.step_ratio = step_size_up / self.total_size
        if mode not in ("triangular", "triangular2", "exp_range") and scale_fn is None:
            raise ValueError("mode is invalid and scale_fn is None")
        self.mode, self.gamma = mode, gamma
        self._scale_fn_custom = scale_fn
        if scale_fn is not None:
            self.scale_mode = scale_mode
        else:
            self.scale_mode = "iterations" if mode == "exp_range" else "cycle"
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            first = optimizer.param_groups[0]
            if "momentum" not in first and "betas" not in first:
                raise ValueError("optimizer must support momentum or beta1 with `cycle_momentum` option enabled")
            self.use_beta1 = "betas" in first
            self.base_momentums = _per_group(base_momentum, optimizer, "base_momentum")
            self.max_momentums = _per_group(max_momentum, optimizer, "max_momentum")
            if last_epoch == -1:
                for high, low, group in zip(self.max_momentums, self.base_momentums, optimizer.param_groups):
                    if self.use_beta1:
                        group["betas"] = (high, *group["betas"][1:])
                    else:
                        group["momentum"] = high
                    group["max_momentum"], group["base_momentum"] = high, low
        self.base_lrs = base_lrs
        super().__init__(optimizer, last_epoch)
        self.base_lrs = base_lrs

    def scale_fn(self, x: float) -> float:
        if self._scale_fn_custom is not None:
            return self._scale_fn_custom(x)
        if self.mode == "triangular":
            return 1.0
        if self.mode == "triangular2":
            return 1 / (2.0 ** (x - 1))
        return self.gamma**x

    def get_lr(self) -> list:
        cycle = math.floor(1 + self.last_epoch / self.total_size)
        x = 1.0 + self.last_epoch / self.total_size - cycle
        scale_factor = x / self.step_ratio if x <= self.step_ratio else (x - 1) / (self.step_ratio - 1)
        scale = self.scale_fn(cycle if self.scale_mode == "cycle" else self.last_epoch)
        lrs = [base + (high - base) * scale_factor * scale for base, high in zip(self.base_lrs, self.max_lrs)]
        if self.cycle_momentum:
            for group, low, high in zip(self.optimizer.param_groups, self.base_momentums, self.max_momentums):
                momentum = high - (high - low) * scale_factor * scale
                if self.use_beta1:
                    group["betas"] = (momentum, *group["betas"][1:])
                else:
                    group["momentum"] = momentum
        return lrs

    def state_dict(self) -> dict:
        state = super().state_dict()
        state.pop("_scale_fn_custom", None)
        return state


class ChainedScheduler(LRScheduler):
    """Steps every scheduler at once. Each of gradcraft's schedulers computes its learning rate in closed
    form, so the chain sets each group's lr to initial_lr times the product of every scheduler's factor
    (its lr over its base lr): what PyTorch's recursive updates compose to."""

    def __init__(self, schedulers, optimizer=None) -> None:
        if len(schedulers) < 1:
            raise ValueError(f"ChainedScheduler expects at least one scheduler to be chained, but got {schedulers}")
        optimizer = optimizer or schedulers[0].optimizer
        for i, scheduler in enumerate(schedulers):
            if scheduler.optimizer is not optimizer:
                raise ValueError(
                    f"ChainedScheduler expects all schedulers to belong to the same optimizer, but got scheduler "
                    f"{type(scheduler).__name__} at index {i} to be different than the optimizer passed in."
                )
        self._schedulers = list(schedulers)
        self.optimizer = optimizer
        self._compose()

    def _compose(self) -> None:
        for i, group in enumerate(self.optimizer.param_groups):
            lr = group.get("initial_lr", group["lr"])
            for scheduler in self._schedulers:
                base = scheduler.base_lrs[i] if hasattr(scheduler, "base_lrs") else None
                if base:
                    lr *= scheduler.get_last_lr()[i] / base
            group["lr"] = lr
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def step(self, epoch=None) -> None:
        for scheduler in self._schedulers:
            scheduler.step()
        self._compose()

    def state_dict(self) -> dict:
        state = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "_schedulers")}
        state["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        state_dict = dict(state_dict)
        for scheduler, saved in zip(self._schedulers, state_dict.pop("_schedulers")):
            scheduler.load_state_dict(saved)
        self.__dict__.update(state_dict)
