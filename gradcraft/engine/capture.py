"""Whole-step graph capture: run a training step through Python once, replay its kernels after.

    step = CapturedStep(lambda: train_step(x, y), device="cuda")
    for batch in data:
        write the batch into x's and y's buffers; opt.prepare()
        loss, stats = step()            # replayed: no Python per op, about 1 us per kernel

The first `warmup` calls run the step eagerly (compiling kernels, filling the memory pool, creating
optimizer state); the next one records every kernel into a CUDA graph; every later call replays it.
The step must read its inputs from tensors whose buffers stay put (write new data into them), keep
values that change per step in device buffers (the optimizer's lr and step count; a step with
dropout calls `advance_dropout(device)` first, which moves dropout's counter with a recorded kernel),
and never wait for the device inside (no .item()). Where the device cannot capture (the CPU), the
step just runs.
"""

from gradcraft.device import get_backend
from gradcraft.errors import UserError


class CapturedStep:
    def __init__(self, step, device: str, warmup: int = 2):
        self.step = step
        self.backend = get_backend(device)
        self.warmup = warmup
        self.runs = 0
        self.graph = None
        self.outputs = None

    @property
    def can_capture(self) -> bool:
        return hasattr(self.backend, "capture")

    def __call__(self):
        if not self.can_capture or self.runs < self.warmup:
            self.runs += 1
            return self.step()
        if self.graph is None:
            try:
                self.outputs, self.graph = self.backend.capture(self.step)
            except Exception as e:  # e.g. a host synchronisation inside the step
                raise UserError(f"this step cannot be captured as a CUDA graph ({e})") from None
        self.backend.replay(self.graph)
        self.runs += 1
        return self.outputs

    def close(self) -> None:
        """Release the graph and its memory (a step that will not run again), and the step function
        (often a bound method of an object holding this one: a cycle that would keep both alive)."""
        if self.graph is not None:
            self.backend.release_graph(self.graph)
        self.graph = self.outputs = self.step = None
