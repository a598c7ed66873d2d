"""Continuous batching: many sequences decoded together, each joining and leaving on its own.

    scheduler = Scheduler(model, slots=8, max_queue=64)
    seq = Sequence(prompt_ids, SamplingParams(max_tokens=50, temperature=0.8, seed=1),
                   on_token=lambda seq, token, logprobs: print(token), on_finish=lambda seq, reason: ...)
    scheduler.submit([seq])          # returns at once; callbacks run on the scheduler's thread

One thread owns the model. Each turn of its loop:
  1. drops the sequences whose client went away (`seq.cancel` set) or whose deadline passed, freeing
     their slots;
  2. gives waiting sequences the free slots (lowest first). A short prompt (at most `step_prompts`
     tokens) goes straight into the running batch and is fed through the decoding step, one token a
     step, riding along with the others: it costs no pass of its own, and on a GPU a pass of the
     eager model costs about what 30 replayed steps do. A longer one (or one that asks for its
     prompt's log-probabilities) is prefilled, a chunk of at most `prefill_chunk` prompt tokens at a
     time and about that many tokens per turn in all, so a long prompt never stalls the running
     sequences for long (prefill interleaved with decoding); when its prompt is done its keys/values
     are copied into its slot and its first token sampled;
  3. runs one decoding step for every running sequence at once; the step also picks each one's next
     token (F.sample_tokens: the argmax, or a draw with a uniform number the sequence took from its
     own generator), so B token ids come back to the host, not B rows of logits.

The KV cache is `slots` rows of fixed buffers (Transformer.slot_caches), allocated once: memory
does not grow with traffic. Each row holds one sequence at its own position; a sequence takes the
lowest free row. A step runs over the first `bucket` rows, the smallest of 2, 4, 8, ... (and
`slots`) that holds every running sequence (free rows inside ride along; their outputs are
dropped): each bucket reads views of the same buffers, and its step has the same shapes every
time, so a CUDA device captures one graph per bucket and replays it (gradcraft/capture.py); the CPU
just runs it.

Why an answer never depends on the traffic: which way a prompt goes depends only on the request; a
prefilled prompt is prefilled alone, in chunks whose bounds depend only on its own length; the
decoding step computes each row from that row alone whatever
the other rows hold (no capacity limit on experts, see MoE's `dropless`); and each sequence samples
with its own NumPy generator seeded from its own seed. So an answer under load equals the same
request served alone, token for token (tests/test_batching.py). (Buckets start at 2 rows: on the
CPU, BLAS computes a one-row product by another method, rounding differently. On a GPU, cuBLAS may
pick another kernel for another bucket, so there an answer is equal up to rounding.)
"""

import threading
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

import gradcraft as gc
from gradcraft.errors import UserError
from gradcraft.inference.generate import History, SamplingParams, StopReason, sample_next
from gradcraft.inference.penalties import Penalties
from gradcraft.inference.step import _Bucket
from gradcraft.sampling import sample_row

CANCELLED = "cancelled"  # the client went away (no answer is sent)
TIMEOUT = "timeout"  # the sequence's deadline passed
ERROR = "error"  # the model failed; `seq.error` says how


class QueueFull(Exception):
    """The waiting line is full: try again later (the server answers 429)."""


class SchedulerClosed(Exception):
    """The scheduler has stopped (the server answers 503)."""


@dataclass
class TokenLogprob:
    """A token's log-probability under the model (logits at temperature 1), and the `top` most
    likely tokens at that position as (id, log-probability), most likely first."""

    token: int
    logprob: float | None
    top: list = field(default_factory=list)


def token_logprob(row: np.ndarray, token: int, top: int) -> TokenLogprob:
    logits = row.astype(np.float64)
    shifted = logits - logits.max()
    logprobs = shifted - np.log(np.exp(shifted).sum())
    best = []
    if top:
        ids = np.argpartition(-logprobs, min(top, len(logprobs) - 1))[:top]
        best = [(int(i), float(logprobs[i])) for i in sorted(ids, key=lambda i: (-logprobs[i], i))]
    return TokenLogprob(int(token), float(logprobs[token]), best)


@dataclass(eq=False)
class Sequence:
    """One sequence to generate. on_token(seq, token, logprob) is called for every token produced
    (logprob a TokenLogprob when `logprobs` is not None, else None) and returns False to stop there
    (a stop string); on_finish(seq, reason) once at the end: a StopReason, CANCELLED, TIMEOUT or ERROR.
    Both run on the scheduler's thread: keep them short. prompt_logprobs: also report each prompt
    token's log-probability (`seq.prompt_logprobs_out`, None for the first) before on_finish."""

    prompt: list
    params: SamplingParams
    on_token: object = None
    on_finish: object = None
    logprobs: int | None = None
    prompt_logprobs: bool = False
    deadline: float | None = None  # time.monotonic() after which the sequence is dropped
    cancel: threading.Event = field(default_factory=threading.Event)
    # the scheduler's state
    slot: int | None = None
    generated: int = 0
    reason: str | None = None
    error: str | None = None
    prompt_logprobs_out: list = field(default_factory=list)
    # the stop token that ended the sequence, if one did: (id, TokenLogprob or None); not handed to
    # on_token (it is no text), but a server reports and counts it, as vLLM does
    stop_token: tuple | None = None

    def __post_init__(self):
        self.rng = np.random.default_rng(self.params.seed)
        self.prefilled = 0  # prompt tokens already run through the model (by prefill or by steps)
        self.caches = None  # the growing caches of the prefill, until copied into the slot
        self.position = 0  # where the next fed token sits
        self.last = 0  # the token fed at the next step
        self.recent = None  # with context crop: the last `context` tokens, prompt and generated


def default_step_prompts(device) -> int:
    """Prompts of at most this many tokens are fed through the decoding step by default: 32 on a GPU,
    where a replayed step costs ~30x less than an eager prefill pass (llama-110m on an H200: ~0.5 ms
    against ~27 ms); none on the CPU, where a prefill pass costs about one step and feeding a prompt
    a token a step only delays its first token (measured with `bench/serve.py --step_prompts`)."""
    return 32 if str(device).startswith("cuda") else 0


class Scheduler:
    def __init__(
        self,
        model,
        slots: int = 8,
        max_queue: int = 64,
        prefill_chunk: int = 256,
        step_prompts: int | None = None,
        warm_up: bool | None = None,
    ):
        device = model.tok_emb.weight.device
        step_prompts = default_step_prompts(device) if step_prompts is None else step_prompts
        if slots < 1 or max_queue < 0 or prefill_chunk < 1 or step_prompts < 0:
            raise UserError(
                f"slots and prefill_chunk must be at least 1, max_queue and step_prompts at least 0 "
                f"(got {slots}, {prefill_chunk}, {max_queue}, {step_prompts})"
            )
        model.eval()
        self.model, self.slots, self.max_queue, self.prefill_chunk = model, slots, max_queue, prefill_chunk
        self.step_prompts = step_prompts
        # capture every bucket's graph at start-up (default: where steps are captured, on a GPU)
        self.warm_up = str(device).startswith("cuda") if warm_up is None else warm_up
        self.context = model.config.seq_len
        self.device = device
        with gc.no_grad():
            self.caches = model.slot_caches(slots)
        self.position = self.caches[0].position  # (slots,) int64, shared by every layer's cache
        self.ids = gc.zeros(slots, 1, dtype=gc.int64, device=self.device).realize()
        # each row's sampling for the step (F.sample_tokens): temperature (0: argmax), top-k (0: none),
        # top-p (1: none) and the uniform number its sequence drew from its own generator
        self.sampling = [
            gc.zeros(slots, dtype=dtype, device=self.device).realize()
            for dtype in (gc.float64, gc.int64, gc.float64, gc.float64)
        ]
        self.penalties = None  # Penalties, made for the first sequence that has some
        self.buckets = {}  # rows -> _Bucket, made on first use
        self.waiting: deque = deque()
        self.prefilling: list = []
        self.running: dict = {}  # slot -> Sequence
        self.free = list(range(slots))
        self.steps = 0  # decoding steps run (for tests and stats)
        self.closed = False
        self.failure = None
        self.wake = threading.Condition()
        self.thread = threading.Thread(target=self._run, name="gradcraft-scheduler", daemon=True)
        self.thread.start()

    # ------------------------------------------------------------------ the public side

    def submit(self, seqs: list) -> None:
        """Queue sequences (all or none). Raises QueueFull when the waiting line cannot take them,
        SchedulerClosed after close() or a failure of the loop."""
        for seq in seqs:
            # (a prompt only scored, max_tokens 0, may fill the whole context)
            longest = self.context if seq.params.max_tokens == 0 else self.context - 1
            if not seq.prompt or len(seq.prompt) > longest:
                raise UserError(f"a prompt must have 1 to {longest} tokens, got {len(seq.prompt)}")
            seq.params.validate(self.context)
        with self.wake:
            if self.closed:
                raise SchedulerClosed(self.failure or "the scheduler is closed")
            # Free slots count as room too: a request that comes while a slot is free is taken even
            # when the loop has not yet moved the ones before it into their slots.
            if len(self.waiting) + len(seqs) > self.max_queue + len(self.free):
                raise QueueFull(f"{len(self.waiting)} requests are waiting (the limit is {self.max_queue})")
            self.waiting.extend(seqs)
            self.wake.notify()

    def load(self) -> dict:
        with self.wake:
            return {
                "waiting": len(self.waiting),
                "running": len(self.running) + len(self.prefilling),
                "slots": self.slots,
            }

    def close(self) -> None:
        with self.wake:
            self.closed = True
            self.wake.notify()
        self.thread.join(timeout=10)

    # ------------------------------------------------------------------ the loop

    def _run(self) -> None:
        try:
            with gc.no_grad():
                if self.warm_up:
                    self._warm_up()
                while self._turn():
                    pass
        except Exception as e:  # noqa: BLE001 (every sequence hears of it; new requests get 503)
            self.failure = f"generation failed: {e}"
            with self.wake:
                self.closed = True
                pending = list(self.waiting) + self.prefilling + list(self.running.values())
                self.waiting.clear()
            for seq in pending:
                seq.error = self.failure
                self._finish(seq, ERROR)
        finally:
            for bucket in self.buckets.values():
                bucket.close()

    def _turn(self) -> bool:
        fed = []  # sequences whose prompts the step feeds, new this turn
        with self.wake:
            while not (self.closed or self.waiting or self.prefilling or self.running):
                self.wake.wait()
            if self.closed:
                pending = list(self.waiting)
                self.waiting.clear()
            else:
                pending = []
                while self.waiting and self.free:
                    seq = self.waiting.popleft()
                    if seq.cancel.is_set() or self._expired(seq):
                        pending.append(seq)
                        continue
                    if seq.params.max_tokens == 0 and not seq.prompt_logprobs:
                        pending.append(seq)  # nothing to compute: it ends at once (below)
                        continue
                    seq.slot = self.free.pop(self.free.index(min(self.free)))
                    if len(seq.prompt) <= self.step_prompts and not seq.prompt_logprobs:
                        seq.last = seq.prompt[0]  # fed by the decoding step from position 0 on
                        self.running[seq.slot] = seq
                        fed.append(seq)
                    else:
                        self.prefilling.append(seq)
            expired = [s for s in self.waiting if s.cancel.is_set() or self._expired(s)]
            for seq in expired:
                self.waiting.remove(seq)
        for seq in fed:  # (device work: outside the lock that submit() waits on)
            self._start_penalties(seq, prompt_seen=False)
        for seq in pending + expired:
            if seq.params.max_tokens == 0 and not (seq.cancel.is_set() or self.closed or self._expired(seq)):
                self._finish(seq, StopReason.LENGTH)
                continue
            self._finish(seq, CANCELLED if seq.cancel.is_set() or self.closed else TIMEOUT)
        if self.closed:
            for seq in self.prefilling + list(self.running.values()):
                self._finish(seq, CANCELLED)
            return False
        for seq in self.prefilling + list(self.running.values()):
            if seq.cancel.is_set() or self._expired(seq):
                self._finish(seq, CANCELLED if seq.cancel.is_set() else TIMEOUT)
        self._prefill_some()
        if self.running:
            self._decode()
        return True

    @staticmethod
    def _expired(seq) -> bool:
        return seq.deadline is not None and time.monotonic() > seq.deadline

    def _finish(self, seq, reason: str) -> None:
        if seq.reason is not None:
            return
        seq.reason, seq.caches = reason, None
        if seq in self.prefilling:
            self.prefilling.remove(seq)
        if seq.slot is not None:
            self.running.pop(seq.slot, None)
            self.free.append(seq.slot)
            seq.slot = None
        if seq.on_finish is not None:
            try:
                seq.on_finish(seq, reason)
            except Exception:  # noqa: BLE001 (a listener's failure must not stop the other sequences)
                pass

    # ------------------------------------------------------------------ prefill

    def _prefill_some(self) -> None:
        """Prefill chunks, oldest sequence first, until about `prefill_chunk` tokens ran this turn."""
        budget = self.prefill_chunk
        for seq in list(self.prefilling):
            while budget > 0 and seq.reason is None and seq.prefilled < len(seq.prompt):
                try:
                    budget -= self._prefill_chunk(seq)
                except Exception as e:  # noqa: BLE001 (this prompt failed, e.g. out of memory: the others go on)
                    seq.error = f"generation failed: {e}"
                    self._finish(seq, ERROR)
            if budget <= 0:
                break

    def _prefill_chunk(self, seq) -> int:
        """Run the next chunk of seq's prompt (bounds at multiples of prefill_chunk: they depend on the
        prompt alone); when the prompt is done, move the sequence into its slot. Returns the tokens run."""
        start = seq.prefilled
        chunk = seq.prompt[start : start - start % self.prefill_chunk + self.prefill_chunk]
        if seq.caches is None:
            seq.caches = self.model.new_caches()
        ids = gc.tensor(np.array([chunk], dtype=np.int64), device=self.device)
        logits = self.model(ids, caches=seq.caches, start=start)  # (1, T, V)
        seq.prefilled += len(chunk)
        done = seq.prefilled == len(seq.prompt)
        if seq.prompt_logprobs:
            rows = logits[0].float()
            gc.realize(rows, *[t for c in seq.caches for t in c.tensors()])
            rows = rows.numpy()
            if start == 0:
                seq.prompt_logprobs_out.append(None)
            for i, token in enumerate(seq.prompt[start + 1 : seq.prefilled + (0 if done else 1)]):
                seq.prompt_logprobs_out.append(token_logprob(rows[i], token, seq.logprobs or 0))
            last = rows[-1]
        else:
            last = logits[:, -1].float()
            gc.realize(last, *[t for c in seq.caches for t in c.tensors()])
            last = last.numpy()[0]
        if done and seq.params.max_tokens == 0:  # the prompt was only scored
            self._finish(seq, StopReason.LENGTH)
        elif done:
            self._enter_slot(seq)
            history = History(seq.prompt, len(last)) if seq.params.penalized() else None
            self._emit(seq, last, history=history)
        return len(chunk)

    def _enter_slot(self, seq) -> None:
        """Copy the prefilled keys/values into row seq.slot of the fixed caches."""
        self._write_slot(seq.slot, seq.caches)
        seq.caches = None
        seq.position = len(seq.prompt)
        self.prefilling.remove(seq)
        self.running[seq.slot] = seq
        self._start_penalties(seq, prompt_seen=True)

    def _start_penalties(self, seq, prompt_seen: bool) -> None:
        """Set the step's penalty rows of seq's slot (inference/penalties.py): for a sequence with
        penalties, and for one taking a slot whose bias row another left behind."""
        if self.penalties is None and seq.params.penalized():
            self.penalties = Penalties(self.slots, self.model.config.vocab_size, self.device)
        if self.penalties is not None and (seq.params.penalized() or seq.slot in self.penalties.biased):
            self.penalties.start(seq.slot, seq, prompt_seen)

    def _write_slot(self, slot: int, caches) -> None:
        writes = []
        row = slice(slot, slot + 1)  # only this row's slots are written, not the whole cache
        for prefilled, cache in zip(caches, self.caches):
            filled = type(cache).from_cache(prefilled, self.context, None)  # (1, Hkv, L, D), padded or a ring
            writes.append(cache.k[row].assign(filled.k))
            writes.append(cache.v[row].assign(filled.v))
        gc.realize(*writes)

    def _crop(self, seq) -> None:
        """Context crop: the last `context` tokens become the window, from position 0 (nanoGPT's sample.py):
        all but the newest are run into fresh caches copied into the slot; the next step feeds the newest."""
        window = seq.recent[-self.context :]
        caches = self.model.new_caches()
        self.model(gc.tensor(np.array([window[:-1]], dtype=np.int64), device=self.device), caches=caches)
        gc.realize(*[t for c in caches for t in c.tensors()])
        self._write_slot(seq.slot, caches)
        seq.position = len(window) - 1

    # ------------------------------------------------------------------ decode

    def _bucket(self) -> "_Bucket":
        """The step over the fewest rows (2, 4, 8, ..., or all) that holds every running sequence."""
        rows = min(2, self.slots)
        while rows <= max(self.running):
            rows = min(2 * rows, self.slots)
        return self._bucket_of(rows)

    def _bucket_of(self, rows: int) -> "_Bucket":
        if rows not in self.buckets:
            self.buckets[rows] = _Bucket(self, rows)
        return self.buckets[rows]

    def _warm_up(self) -> None:
        """Capture every bucket's step before the first request, as vLLM captures its CUDA graphs at
        start-up: under load the batch grows through the buckets, and capturing one then would stall
        every running sequence for its eager runs and capture (~0.1 s for llama-110m on an H200).
        The steps run over free rows only (their writes at position 0 are overwritten by the first
        token of whichever sequence takes the row); they are not counted in `steps`."""
        rows = min(2, self.slots)
        while not self.closed:  # (close() during the warm-up stops it at the next bucket)
            bucket = self._bucket_of(rows)
            for _ in range(bucket.runs_to_capture()):
                bucket()
            if rows == self.slots:
                return
            rows = min(2 * rows, self.slots)

    def _decode(self) -> None:
        ids = np.zeros((self.slots, 1), dtype=np.int64)
        positions = np.zeros(self.slots, dtype=np.int64)
        temperature, top_k, uniform = np.zeros(self.slots), np.zeros(self.slots, dtype=np.int64), np.zeros(self.slots)
        top_p = np.ones(self.slots)
        for slot, seq in self.running.items():
            ids[slot, 0], positions[slot] = seq.last, seq.position
            params = seq.params
            if seq.prefilled < len(seq.prompt) - 1:
                continue  # a prompt token whose output is not wanted: no draw from the generator
            if params.temperature and seq.logprobs is None:  # drawn in the step, with its own uniform
                temperature[slot], uniform[slot] = params.temperature, seq.rng.random()
                top_k[slot] = params.top_k or 0
                top_p[slot] = params.top_p if params.top_p is not None else 1.0
        host = [ids, positions, temperature, top_k, top_p, uniform]
        targets = [self.ids, self.position, *self.sampling]
        # the penalized step (inference/penalties.py) runs while a running sequence has penalties
        penalized = any(seq.params.penalized() for seq in self.running.values())
        if penalized:
            host += self.penalties.columns(self.running)
            targets += self.penalties.scalars
        gc.realize(*[t.assign(gc.tensor(a, device=self.device)) for t, a in zip(targets, host)])
        logits, scores, tokens = self._bucket()(penalized)
        self.steps += 1
        # Each row's token came from the step (its argmax, or its draw): B ids to the host, not B rows
        # of logits, unless a sequence reports log-probabilities or a row the device could not sample.
        tokens = tokens.numpy()
        rows = sampled = None  # the logits, and the rows the tokens are drawn from (after penalties)
        for slot, seq in list(self.running.items()):
            seq.position += 1
            if seq.prefilled < len(seq.prompt):  # a prompt token went through the step
                seq.prefilled += 1
                if seq.prefilled < len(seq.prompt):
                    seq.last = seq.prompt[seq.prefilled]
                    continue
            if seq.logprobs is not None or tokens[slot] < 0:
                rows = logits.numpy() if rows is None else rows
                sampled = (rows if scores is logits else scores.numpy()) if sampled is None else sampled
            if seq.logprobs is not None:
                # (sampled here: its generator was not drawn from above)
                self._emit(seq, rows[slot], scores=sampled[slot])
            elif tokens[slot] < 0:  # the same draw on the host, with the same uniform
                self._emit(
                    seq,
                    token=sample_row(sampled[slot], temperature[slot], top_k[slot] or None, top_p[slot], uniform[slot]),
                )
            else:
                self._emit(seq, token=int(tokens[slot]))

    def _emit(self, seq, row=None, token: int | None = None, scores=None, history=None) -> None:
        """Hand on seq's next token (sampled from its logits row, or from `scores`, the row after the
        penalties, or from the row with `history`'s penalties applied here; or given) and finish the
        sequence when it ends. Log-probabilities are the model's: of `row`, before any penalty."""
        if token is None:
            token = sample_next(row if scores is None else scores, seq.params, seq.rng, history)
        elif seq.logprobs is not None:
            raise ValueError("a sequence that reports log-probabilities needs its logits row")
        if token in seq.params.stop_ids:
            seq.stop_token = (token, None if seq.logprobs is None else token_logprob(row, token, seq.logprobs))
            return self._finish(seq, StopReason.STOP)
        seq.generated += 1
        seq.last = token
        if seq.params.context == "crop":  # the tokens a cropped window is taken from
            seq.recent = (seq.recent or list(seq.prompt)) + [token]
            del seq.recent[: -self.context]
        logprob = None if seq.logprobs is None else token_logprob(row, token, seq.logprobs)
        try:
            keep_going = seq.on_token is None or seq.on_token(seq, token, logprob) is not False
        except Exception:  # noqa: BLE001 (the listener is gone: drop the sequence, keep serving)
            return self._finish(seq, CANCELLED)
        if not keep_going:
            self._finish(seq, StopReason.STOP)
        elif seq.generated >= seq.params.max_tokens:
            self._finish(seq, StopReason.LENGTH)
        elif seq.position >= self.context:  # the next token would sit past the trained context
            if seq.params.context == "crop":
                self._crop(seq)
            else:
                self._finish(seq, StopReason.CONTEXT)
