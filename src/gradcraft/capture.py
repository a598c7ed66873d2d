"""Whole-step graph capture: run a training step through Python once, replay its kernels after.
(Above the Tensor: the step's inputs are tensors it makes.)

    step = CapturedStep(train_step, device="cuda")     # train_step(x, y) -> (loss, stats)
    for x, y in data:                                   # NumPy arrays (or tensors) of fixed shapes
        opt.prepare()
        loss, stats = step(x, y)        # replayed: no Python per op, about 1 us per kernel

As tinygrad's TinyJit does, the step owns its input tensors: the first call makes a device tensor
for each argument, every call copies the arguments' data into them (a host write, outside any
recorded kernels) and calls the step function with those same tensors, whose memory stays put. A
caller whose inputs must be particular tensors (shared with a KV cache, say) passes them as
`inputs=` instead.

The first `warmup` calls run the step eagerly (compiling kernels, filling the memory pool, creating
optimizer state); the next one records every kernel into a CUDA graph; every later call replays it.
The step must keep values that change per step in device buffers (the optimizer's lr and step
count; a step with dropout calls `advance_dropout(device)` first, which moves dropout's counter with
a recorded kernel), and never wait for the device inside (no .item()). Where the device cannot
capture (the CPU), the step just runs.
"""

import numpy as np

from gradcraft.device import get_backend
from gradcraft.errors import UserError
from gradcraft.tensor import Tensor, buffer_of, write_from_host


class CapturedStep:
    def __init__(self, step, device: str, warmup: int = 2, inputs=None):
        self.step = step
        self.device = device
        self.backend = get_backend(device)
        self.warmup = warmup
        self.inputs = list(inputs) if inputs is not None else None
        self.runs = 0
        self.graph = None
        self.outputs = None

    @property
    def can_capture(self) -> bool:
        return hasattr(self.backend, "capture")

    def __call__(self, *args):
        inputs = self.feed(*args)
        if not self.can_capture or self.runs < self.warmup:
            self.runs += 1
            return self.step(*inputs)
        if self.graph is None:
            try:
                self.outputs, self.graph = self.backend.capture(lambda: self.step(*inputs))
            except Exception as e:  # e.g. a host synchronisation inside the step
                raise UserError(f"this step cannot be captured as a CUDA graph ({e})") from None
        self.backend.replay(self.graph)
        self.runs += 1
        return self.outputs

    def launch(self, *args, fetch=()):
        """Run the step as a call does, and start copying the outputs at the indices in `fetch` to
        the host behind it, without waiting: returns a function that waits and gives their NumPy
        arrays. The host can then queue the next step before it reads these (a decoding loop whose
        step feeds its own next input: called with no arguments, the inputs keep what the device
        holds)."""
        outputs = self(*args)
        outputs = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
        waits = [self.backend.to_numpy_later(buffer_of(outputs[i])) for i in fetch]
        return lambda: [wait() for wait in waits]

    def feed(self, *args) -> list:
        """Copy the arguments (NumPy arrays or tensors) into the step's input tensors, made from the
        first call's arguments when the step was given none; returns those tensors. No arguments:
        the inputs keep their contents (a step that writes its next inputs itself)."""
        if not args and self.inputs is not None:
            return self.inputs
        if self.inputs is None:  # the step's own tensors: copies, whose memory nothing else writes
            self.inputs = [
                Tensor(a.numpy() if isinstance(a, Tensor) else np.array(a), device=self.device).realize() for a in args
            ]
            return self.inputs
        if len(args) != len(self.inputs):
            raise UserError(f"this captured step takes {len(self.inputs)} inputs, got {len(args)}")
        for target, value in zip(self.inputs, args):
            if tuple(value.shape if hasattr(value, "shape") else np.shape(value)) != target.shape:
                raise UserError(
                    f"a captured step's input has shape {tuple(np.shape(value))}, the step was built "
                    f"for {target.shape}: keep the shapes fixed, or build another step"
                )
            if isinstance(value, Tensor):
                target.copy_(value)  # on the device
                continue
            write_from_host(target, np.asarray(value, dtype=target.dtype.np))
        return self.inputs

    def close(self) -> None:
        """Release the graph and its memory (a step that will not run again), and the step function
        (often a bound method of an object holding this one: a cycle that would keep both alive)."""
        if self.graph is not None:
            self.backend.release_graph(self.graph)
        self.graph = self.outputs = self.step = None
