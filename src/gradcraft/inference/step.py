"""The scheduler's decoding step over its first `rows` slots (inference/batching.py): views of the
scheduler's buffers, run as a captured CUDA graph where the device can, with or without the
penalties (inference/penalties.py; a step of its own, captured when first used, so that a batch with
no penalty runs none of their ops)."""

import gradcraft as gc
import gradcraft.nn.functional as F
from gradcraft.capture import CapturedStep
from gradcraft.errors import UserError


class _Bucket:
    """The decoding step over the first `rows` slots: views of the scheduler's buffers (writes go
    through to them), and the step captured as a CUDA graph where the device can."""

    def __init__(self, scheduler, rows: int):
        self.model, self.scheduler, self.rows = scheduler.model, scheduler, rows
        self.ids = scheduler.ids[:rows].realize()
        self.sampling = [t[:rows].realize() for t in scheduler.sampling]
        position = scheduler.position[:rows].realize()
        self.caches = [
            type(c)(c.k[:rows].realize(), c.v[:rows].realize(), position, c.window) for c in scheduler.caches
        ]
        self.position = position
        self.captured = CapturedStep(self._step, scheduler.device)
        self.penalized = None  # the step with penalties: its own CapturedStep, made on first use
        self.penalty_state = None

    def _step(self):
        logits = self.model(self.ids, caches=self.caches, position=self.position)[:, -1].float()  # (rows, V)
        tokens = F.sample_tokens(logits, *self.sampling)  # each row's argmax or draw (-1: the host's)
        gc.realize(logits, tokens, *[t for c in self.caches for t in c.tensors()])
        return logits, tokens

    def _penalized_step(self):
        from gradcraft.inference.penalties import apply

        logits = self.model(self.ids, caches=self.caches, position=self.position)[:, -1].float()  # (rows, V)
        scores, writes = apply(logits, self.ids, *self.penalty_state)
        tokens = F.sample_tokens(scores, *self.sampling)
        gc.realize(logits, scores, tokens, *writes, *[t for c in self.caches for t in c.tensors()])
        return logits, scores, tokens

    def runs_to_capture(self) -> int:
        """Calls until this step replays a captured graph (0: it does, or never will, on this device)."""
        c = self.captured
        if c is None or c.graph is not None or not c.can_capture:
            return 0
        return max(0, c.warmup - c.runs) + 1

    def __call__(self, penalized: bool = False):
        """(logits, the rows the tokens were drawn from, tokens): one step, with the penalties or not."""
        if penalized:
            if self.penalty_state is None:
                self.penalty_state = self.scheduler.penalties.tensors(self.rows)
                self.penalized = CapturedStep(self._penalized_step, self.scheduler.device)
            return self._run("penalized", self._penalized_step)
        logits, tokens = self._run("captured", self._step)
        return logits, logits, tokens

    def _run(self, name: str, step):
        captured = getattr(self, name)
        if captured is None:
            return step()
        try:
            return captured()
        except UserError:  # the step cannot be captured here: run it eagerly (same results, slower)
            captured.close()
            setattr(self, name, None)
            return step()

    def close(self) -> None:
        for name in ("captured", "penalized"):
            if getattr(self, name) is not None:
                getattr(self, name).close()
                setattr(self, name, None)
