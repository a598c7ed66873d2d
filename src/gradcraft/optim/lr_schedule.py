"""Learning-rate schedules: a function of the step number, and nothing else to save.

sched = CosineWithWarmup(max_lr=6e-4, min_lr=6e-5, warmup_steps=100, total_steps=5000)
lr = sched(step)          # step counts from 0
"""

import math
from dataclasses import asdict, dataclass


@dataclass
class _WarmupThenDecay:
    """Linear warmup from ~0 to max_lr over warmup_steps, then `decay(progress)` from max_lr
    (progress 0) to min_lr (progress 1, reached at total_steps and kept after)."""

    max_lr: float
    min_lr: float
    warmup_steps: int
    total_steps: int

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            return self.max_lr * (step + 1) / self.warmup_steps
        progress = min(1.0, (step - self.warmup_steps) / max(1, self.total_steps - self.warmup_steps))
        return self.min_lr + self.decay(progress) * (self.max_lr - self.min_lr)

    def state_dict(self) -> dict:
        return {"kind": self.kind, **asdict(self)}


class CosineWithWarmup(_WarmupThenDecay):
    """Linear warmup, then a cosine from max_lr down to min_lr at total_steps."""

    kind = "cosine"

    @staticmethod
    def decay(progress: float) -> float:
        return 0.5 * (1.0 + math.cos(math.pi * progress))


@dataclass
class Constant:
    lr: float

    def __call__(self, step: int) -> float:
        return self.lr

    def state_dict(self) -> dict:
        return {"kind": "constant", **asdict(self)}


class LinearWithWarmup(_WarmupThenDecay):
    """Linear warmup, then a straight line from max_lr down to min_lr at total_steps."""

    kind = "linear"

    @staticmethod
    def decay(progress: float) -> float:
        return 1.0 - progress


class _FromBase:
    """A schedule made from another one's state_dict (its `base` field): min_lr and the decay shape
    are the base's."""

    def __post_init__(self):
        self._base = from_state_dict(self.base)

    @property
    def min_lr(self) -> float:
        return self._base.min_lr

    def decay(self, progress: float) -> float:
        return self._base.decay(progress)


@dataclass
class Rescaled(_FromBase):
    """A schedule resumed with another total: `base` up to `from_step`, then base's decay shape from
    base(from_step) down to base.min_lr at total_steps (held after). The learning rate never jumps:
    at from_step both pieces give base(from_step)."""

    base: dict  # the state_dict of the schedule the run followed until from_step
    from_step: int
    total_steps: int

    def __post_init__(self):
        super().__post_init__()
        self._start_lr = self._base(self.from_step)

    def __call__(self, step: int) -> float:
        if step < self.from_step:
            return self._base(step)
        progress = min(1.0, (step - self.from_step) / max(1, self.total_steps - self.from_step))
        return self._base.min_lr + self._base.decay(progress) * (self._start_lr - self._base.min_lr)

    def state_dict(self) -> dict:
        return {"kind": "rescaled", "base": self.base, "from_step": self.from_step, "total_steps": self.total_steps}


@dataclass
class Shifted(_FromBase):
    """`base` started at `offset` instead of 0: a run that goes on from another trainer's step
    (an imported K2 checkpoint, docs/k2.md) warms up again from there with fresh optimizer moments."""

    base: dict  # the state_dict of a warmup-then-decay schedule, counted from `offset`
    offset: int

    def __call__(self, step: int) -> float:
        return self._base(max(0, step - self.offset))

    @property
    def total_steps(self) -> int:
        return self.offset + self._base.total_steps

    def state_dict(self) -> dict:
        return {"kind": "shifted", "base": self.base, "offset": self.offset}


SCHEDULES = {
    "cosine": CosineWithWarmup,
    "constant": Constant,
    "linear": LinearWithWarmup,
    "rescaled": Rescaled,
    "shifted": Shifted,
}


def from_state_dict(state: dict):
    state = dict(state)
    return SCHEDULES[state.pop("kind")](**state)


def with_total_steps(schedule, step: int, total_steps: int):
    """`schedule` (resumed at `step`) changed to end its decay at `total_steps`, without a jump.

    - the same total: the schedule itself;
    - a constant schedule: unchanged;
    - still in warmup (step <= warmup_steps): the warmup goes on as before (it does not depend on
      the total) and the decay then spans the new total;
    - otherwise the remaining decay is stretched (or squeezed): from the current learning rate
      schedule(step), same shape, down to min_lr at total_steps.
    """
    if getattr(schedule, "total_steps", total_steps) == total_steps or isinstance(schedule, Constant):
        return schedule
    if isinstance(schedule, _WarmupThenDecay) and step <= schedule.warmup_steps:
        return type(schedule)(schedule.max_lr, schedule.min_lr, schedule.warmup_steps, total_steps)
    if isinstance(schedule, Shifted) and step <= schedule.offset + schedule._base.warmup_steps:
        base = with_total_steps(schedule._base, step - schedule.offset, total_steps - schedule.offset)
        return Shifted(base.state_dict(), schedule.offset)
    return Rescaled(schedule.state_dict(), step, total_steps)


def set_lr(optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
