"""Text generation with a KV cache: prefill the prompt once, then one token per step.

    for token in generate_tokens(model, prompt_ids, max_tokens=100, temperature=0.8, top_k=40, seed=1):
        ...

Sampling runs on the host over the last position's logits: greedy when
`temperature` is None or 0, else softmax(logits / T) restricted to the top-k
and the top-p nucleus. Each sequence has its own NumPy generator, so a given
seed gives the same text alone or in a batch.
"""

from dataclasses import dataclass, field

import numpy as np

import gradcraft as gc
import gradcraft.nn.functional as F
from gradcraft.capture import CapturedStep
from gradcraft.errors import UserError
from gradcraft.sampling import min_p_shift, penalize, sample_row

MIN_TEMPERATURE = 1e-6  # a positive temperature below this overflows logits / T (0 means greedy)
MAX_TEMPERATURE = 100.0
CONTEXT_MODES = ("stop", "crop")


@dataclass
class SamplingParams:
    max_tokens: int = 512
    temperature: float | None = None  # None or 0: greedy
    top_k: int | None = 20
    top_p: float | None = None
    seed: int | None = None
    stop_ids: tuple = ()  # token ids that end generation (e.g. <|endoftext|>); not emitted
    stop_strings: tuple = field(default_factory=tuple)  # handled by the text layer (see TextGenerator)
    # penalties and filters (gradcraft/sampling.py's `penalize`): OpenAI's frequency and presence
    # penalties over the generated tokens, HF's repetition penalty over the prompt's and the generated
    # ones, a bias per token id, and min_p
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: dict | None = None  # {token id: bias in [-100, 100]}
    min_p: float = 0.0

    # At the model's context length: "stop", or "crop": go on with the last context tokens as the
    # window, recomputed from scratch for every further token (nanoGPT's sample.py)
    context: str = "stop"

    def penalized(self) -> bool:
        """Whether any penalty or filter changes the logits."""
        return bool(
            self.frequency_penalty or self.presence_penalty or self.repetition_penalty != 1.0 or self.logit_bias
        ) or bool(self.min_p and self.temperature)

    def bias_row(self, vocab_size: int) -> np.ndarray | None:
        if not self.logit_bias:
            return None
        row = np.zeros(vocab_size, dtype=np.float32)
        for token, bias in self.logit_bias.items():
            row[int(token)] = bias
        return row

    def validate(self, context: int) -> None:
        if self.context not in CONTEXT_MODES:
            raise UserError(f"context must be one of {', '.join(CONTEXT_MODES)}, got {self.context!r}")
        if self.max_tokens < 0:
            raise UserError(f"max_tokens must be at least 0, got {self.max_tokens}")
        for name in ("frequency_penalty", "presence_penalty"):
            if not -2 <= getattr(self, name) <= 2:
                raise UserError(f"{name} must be in [-2, 2], got {getattr(self, name)}")
        if not 0 < self.repetition_penalty <= 100:
            raise UserError(f"repetition_penalty must be in (0, 100], got {self.repetition_penalty}")
        if not 0 <= self.min_p <= 1:
            raise UserError(f"min_p must be in [0, 1], got {self.min_p}")
        for token, bias in (self.logit_bias or {}).items():
            if int(token) < 0 or not -100 <= bias <= 100:
                raise UserError(f"logit_bias takes token ids >= 0 and biases in [-100, 100], got {token}: {bias}")
        if self.temperature is not None and self.temperature < 0:
            raise UserError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k is not None and self.top_k < 1:
            raise UserError(f"top_k must be at least 1, got {self.top_k}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise UserError(f"top_p must be in (0, 1], got {self.top_p}")


class History:
    """The tokens a sequence has seen, for the penalties: `seen` (V,) marks the prompt's and the
    generated ones, `counts` (V,) counts the generated ones."""

    def __init__(self, prompt: list, vocab_size: int):
        self.counts = np.zeros(vocab_size, dtype=np.float32)
        self.seen = np.zeros(vocab_size, dtype=np.float32)
        self.seen[np.asarray(prompt, dtype=np.int64)] = 1

    def add(self, token: int) -> None:
        self.counts[token] += 1
        self.seen[token] = 1


def penalized_row(logits: np.ndarray, params: SamplingParams, history: History) -> np.ndarray:
    """The row the next token is drawn from: the logits after params' penalties (sampling.penalize)."""
    return penalize(
        logits,
        history.counts,
        history.seen,
        params.bias_row(len(logits)),
        params.frequency_penalty,
        params.presence_penalty,
        params.repetition_penalty,
        min_p_shift(params.min_p, params.temperature),
    )


def sample_next(logits: np.ndarray, params: SamplingParams, rng: np.random.Generator, history=None) -> int:
    """Pick the next token id from one row of logits (V,): its argmax when greedy, else a draw with
    one uniform number from rng (gradcraft/sampling.py; the same token Generator.choice would pick).
    history: the sequence's History, when params has penalties (applied to the row first)."""
    if history is not None and params.penalized():
        logits = penalized_row(logits, params, history)
    if not params.temperature:
        return int(np.argmax(logits))
    return sample_row(logits, params.temperature, params.top_k, params.top_p, rng.random())


class StopReason:
    LENGTH = "length"  # max_tokens reached
    STOP = "stop"  # a stop token or stop string
    CONTEXT = "context"  # the model's context length reached


def _realize_step(logits, caches):
    gc.realize(logits, *[t for c in caches for t in c.tensors()])


class StepResult:
    """A decoding step's logits (B, V) on the device, and each row's most likely token where the
    step computed it there: greedy decoding then copies B ids to the host, not B x V logits."""

    def __init__(self, logits, best=None):
        self.logits, self.best, self._rows = logits, best, None

    def rows(self) -> np.ndarray:
        if self._rows is None:
            self._rows = np.asarray(self.logits.numpy(), dtype=np.float32)
        return self._rows

    def tokens(self, params: SamplingParams, rngs: list, finished: list, histories=None) -> list:
        """The next token of every row (rngs: one generator per row; histories: one History per row
        when params has penalties); 0 for the finished rows, which ride along and are not sampled."""
        if not params.temperature and self.best is not None and histories is None:
            return [0 if done else int(t) for t, done in zip(self.best.numpy(), finished)]
        rows = self.rows()
        histories = histories or [None] * len(rows)
        return [
            0 if done else sample_next(row, params, rng, history)
            for row, rng, done, history in zip(rows, rngs, finished, histories)
        ]


class _Decoder:
    """Runs the one-token decoding steps after the prefill.

    On a GPU (or when asked, `static=True`) the prefilled caches move into StaticKVCaches of the
    whole context, the step reads its token ids and position from fixed device buffers, and the
    step is captured once as a CUDA graph and replayed for every token: a few hundred kernels per
    token then cost one launch from Python instead of one each. Otherwise (the CPU, and models the
    static caches cannot serve) each step appends to the growing KVCaches.
    """

    def __init__(self, model, caches, batch: int, position: int, device: str, static: bool):
        self.model, self.caches, self.device, self.static, self.captured = model, caches, device, None, None
        if static:
            self.position = gc.tensor(np.array([position], dtype=np.int64), device=device).realize()
            self.static = model.static_caches(caches, self.position)
        if self.static is not None:
            self.ids = gc.zeros(batch, 1, dtype=gc.int64, device=device).realize()
            # the step's inputs are these tensors (the static caches read the position too)
            self.captured = CapturedStep(self._static_step, device, inputs=(self.ids, self.position))

    def _static_step(self, ids=None, position=None):
        # The logits stay in the model's dtype (no float32 copy in the step: the host widens them
        # only when it samples); the argmax of the bf16 values is the float32 values' argmax.
        logits = self.model(self.ids, caches=self.static, position=self.position)[:, -1]
        gc.realize(logits, *[t for c in self.static for t in c.tensors()])
        # Greedy decoding reads these B ids, not the (B, V) logits. The next step's inputs are written by
        # the step itself (F.greedy_advance, one kernel): its argmax at the next position. A greedy
        # loop then queues step after step without the host in between (`launch_greedy`); a caller
        # that picks the tokens itself feeds them over these.
        best = F.greedy_advance(logits, self.ids, self.position).realize()
        return logits, best

    def start(self, next_ids: list, position: int) -> None:
        """Write the first fed tokens and their position (after the prefill) for `launch_greedy`."""
        ids, where = np.array(next_ids, dtype=np.int64).reshape(-1, 1), np.array([position], dtype=np.int64)
        if self.captured is not None:
            self.captured.feed(ids, where)
        else:
            self.ids.copy_(ids)
            self.position.copy_(where)

    def launch_greedy(self):
        """Queue one step on what the device holds (the last step's argmax, at the next position) and
        return a function that waits for it and gives each row's argmax: the caller queues the next
        step before it waits for this one, so the device never waits for the host."""
        if self.captured is not None:
            try:
                wait = self.captured.launch(fetch=(1,))
                return lambda: wait()[0]
            except UserError:  # the step cannot be captured here: run it eagerly (same results, slower)
                self.captured.close()
                self.captured = None
        _, best = self._static_step()
        tokens = best.numpy()
        return lambda: tokens

    def close(self) -> None:
        if self.captured is not None:
            self.captured.close()  # a captured graph holds its own memory until released
        # Drop the whole-context caches now (not at some later garbage collection): a server runs
        # one generation after another.
        self.captured = self.static = self.caches = None

    def restart(self, windows: list) -> "StepResult":
        """The logits after `windows` (one list of ids per row, run from position 0 in fresh caches):
        a cropped context's next token, as a model without a cache computes it."""
        self.caches = self.model.new_caches()
        ids = gc.tensor(np.array(windows, dtype=np.int64), device=self.device)
        logits = self.model(ids, caches=self.caches)[:, -1]
        _realize_step(logits, self.caches)
        return StepResult(logits.float())

    def step(self, next_ids: list, position: int) -> "StepResult":
        """The logits after feeding next_ids at `position`."""
        ids = np.array(next_ids, dtype=np.int64).reshape(-1, 1)
        if self.static is None:
            logits = self.model(gc.tensor(ids, device=self.device), caches=self.caches, start=position)[:, -1]
            _realize_step(logits, self.caches)
            return StepResult(logits.float())
        position = np.array([position], dtype=np.int64)
        if self.captured is not None:
            try:
                return StepResult(*self.captured(ids, position))  # copies ids and position in first
            except UserError:  # the step cannot be captured here: run it eagerly (same results, slower)
                self.captured.close()
                self.captured = None
        self.ids.copy_(ids)
        self.position.copy_(position)
        return StepResult(*self._static_step())


@gc.no_grad()
def generate_batch(model, prompts: list, params: SamplingParams, on_token=None, static: bool | None = None):
    """Generate for several prompts of the same length at once.

    Returns (list of generated id lists, list of stop reasons). `on_token(row, token_id)` is
    called as each token is produced (for streaming). static: decode through StaticKVCaches and a
    replayed CUDA graph (see _Decoder); None = on CUDA devices.
    """
    lengths = {len(p) for p in prompts}
    if len(lengths) != 1:
        raise ValueError("generate_batch needs prompts of one length; use generate() for mixed lengths")
    context = model.config.seq_len
    params.validate(context)
    prompt_len = lengths.pop()
    crop = params.context == "crop"
    if prompt_len < 1:
        raise UserError("the prompt is empty: give at least one token")
    if prompt_len >= context and not crop:
        raise UserError(
            f"the prompt has {prompt_len} tokens; the model's context is {context}: shorten it, or keep its "
            "last tokens with context crop"
        )
    if crop:  # a long prompt's last context tokens; the window slides on from there (_decode_loop)
        prompts, prompt_len, static = [p[-context:] for p in prompts], min(prompt_len, context), False
    if params.max_tokens == 0:
        return [[] for _ in prompts], [StopReason.LENGTH] * len(prompts)
    model.eval()
    device = model.tok_emb.weight.device
    rngs = [np.random.default_rng(params.seed) for _ in prompts]
    caches = model.new_caches()
    logits = model(gc.tensor(np.array(prompts, dtype=np.int64), device=device), caches=caches)[:, -1]
    _realize_step(logits, caches)
    position = prompt_len  # where the next fed token sits
    decoder = _Decoder(
        model, caches, len(prompts), position, device, static=device.startswith("cuda") if static is None else static
    )
    try:
        first = StepResult(logits.float())
        if decoder.static is not None and not params.temperature and not params.penalized():
            return _greedy_pipelined(decoder, first, position, prompts, params, rngs, on_token, context)
        return _decode_loop(decoder, first, position, prompts, params, rngs, on_token, context)
    finally:
        decoder.close()


def _take(tokens, out, reasons, params, on_token, histories=None) -> list:
    """Hand on each unfinished row's token and end the rows it ends; returns the ids to feed next
    (0 for rows already finished, which ride along)."""
    next_ids = []
    for r, token in enumerate(tokens):
        if reasons[r] is not None:
            next_ids.append(0)
            continue
        if token in params.stop_ids:
            reasons[r] = StopReason.STOP
        else:
            out[r].append(token)
            if histories is not None:
                histories[r].add(token)
            if on_token is not None and on_token(r, token) is False:
                reasons[r] = StopReason.STOP
            elif len(out[r]) >= params.max_tokens:
                reasons[r] = StopReason.LENGTH
        next_ids.append(token)
    return next_ids


def _decode_loop(decoder, result, position, prompts, params, rngs, on_token, context):
    out = [[] for _ in prompts]
    reasons = [None] * len(prompts)
    vocab = decoder.model.config.vocab_size
    histories = [History(p, vocab) for p in prompts] if params.penalized() else None
    # context crop: each row's last `context` tokens (finished rows ride along with their fed 0s)
    windows = [list(p) for p in prompts] if params.context == "crop" else None
    while True:
        finished = [reason is not None for reason in reasons]
        next_ids = _take(result.tokens(params, rngs, finished, histories), out, reasons, params, on_token, histories)
        if all(reason is not None for reason in reasons):
            break
        if windows is not None:
            for window, token in zip(windows, next_ids):
                window.append(token)
                del window[:-context]
        if position >= context:  # the next token would sit past the trained context
            if windows is None:
                reasons = [reason or StopReason.CONTEXT for reason in reasons]
                break
            result = decoder.restart(windows)  # positions 0..context-1 again, keys and values recomputed
            continue
        result = decoder.step(next_ids, position)
        position += 1
    return out, reasons


def _greedy_pipelined(decoder, first, position, prompts, params, rngs, on_token, context):
    """_decode_loop for greedy decoding through static caches, one step ahead: each step feeds itself
    its argmax at the next position (_Decoder._static_step), so step k + 1 is queued before the host
    reads step k's tokens, and the device never waits for the host. The tokens are the same: a
    finished row is fed its own argmax rather than 0, and rows never read each other. Once every row
    has ended, the one step queued beyond is dropped."""
    out = [[] for _ in prompts]
    reasons = [None] * len(prompts)
    next_ids = _take(first.tokens(params, rngs, [False] * len(prompts)), out, reasons, params, on_token)
    if all(reason is not None for reason in reasons):
        return out, reasons
    if position >= context:
        return out, [reason or StopReason.CONTEXT for reason in reasons]
    decoder.start(next_ids, position)
    pending = decoder.launch_greedy()  # the step at `position`
    while True:
        position += 1  # where the next step's token sits
        ahead = decoder.launch_greedy() if position < context else None
        _take([int(t) for t in pending()], out, reasons, params, on_token)
        if all(reason is not None for reason in reasons):
            break
        if ahead is None:  # the next token would sit past the trained context
            reasons = [reason or StopReason.CONTEXT for reason in reasons]
            break
        pending = ahead
    return out, reasons


def generate(model, prompts: list, params: SamplingParams, on_token=None, static: bool | None = None):
    """Generate for prompts of any lengths: prompts of equal length are batched together."""
    results, reasons = [None] * len(prompts), [None] * len(prompts)
    by_length: dict[int, list[int]] = {}
    for i, p in enumerate(prompts):
        by_length.setdefault(len(p), []).append(i)
    for indices in by_length.values():
        callback = None if on_token is None else (lambda r, t, idx=indices: on_token(idx[r], t))
        out, why = generate_batch(model, [prompts[i] for i in indices], params, callback, static)
        for i, o, w in zip(indices, out, why):
            results[i], reasons[i] = o, w
    return results, reasons


@gc.no_grad()
def generate_without_cache(model, prompt: list, params: SamplingParams) -> list:
    """Greedy/sampled generation recomputing the whole context each step (the KV cache's oracle); with
    context crop, the last seq_len tokens each step, as nanoGPT's sample.py does."""
    rng = np.random.default_rng(params.seed)
    model.eval()
    device = model.tok_emb.weight.device
    ids, out, context = list(prompt), [], model.config.seq_len
    crop = params.context == "crop"
    history = History(prompt, model.config.vocab_size)
    while len(out) < params.max_tokens and (crop or len(ids) < context):
        window = ids[-context:] if crop else ids
        logits = model(gc.tensor(np.array([window], dtype=np.int64), device=device))[0, -1].float().numpy()
        token = sample_next(logits, params, rng, history)
        if token in params.stop_ids:
            break
        out.append(token)
        ids.append(token)
        history.add(token)
    return out
