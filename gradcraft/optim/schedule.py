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


SCHEDULES = {"cosine": CosineWithWarmup, "constant": Constant, "linear": LinearWithWarmup}


def from_state_dict(state: dict):
    state = dict(state)
    return SCHEDULES[state.pop("kind")](**state)


def set_lr(optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
