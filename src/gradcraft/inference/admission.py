"""Requests into sequences, for the completions server (inference/server.py): a request's prompts
are checked and encoded, one Sequence per (prompt, choice) is queued on the Scheduler, and the
choices' events are collected until each ends. The HTTP routes (server.py) only shape the answers.

A refusal is a RequestError, which the server turns into an answer with OpenAI's error shape.
"""

import asyncio
import threading
import time

from gradcraft.errors import UserError
from gradcraft.inference.generate import SamplingParams
from gradcraft.inference.http_front import _Cancelled
from gradcraft.inference.batching import CANCELLED, ERROR, TIMEOUT, QueueFull, SchedulerClosed, Sequence
from gradcraft.inference.text import TextStream


class RequestError(Exception):
    """A request the server refuses: becomes an HTTP answer with OpenAI's error shape."""

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        code: str | None = None,
        kind: str = "invalid_request_error",
        headers: dict | None = None,
    ):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = status, message, param, code, kind
        self.headers = headers


class _Choice:
    """One choice of a request: a Sequence on the scheduler's thread, events on the event loop's.

    Events (put on the request's queue): ("text", index, piece, logprob entries) as text becomes
    final, and ("end", index, reason, piece, logprob entries) once. A logprob entry is
    (token text, TokenLogprob or None, text offset, top token texts)."""

    def __init__(
        self,
        index: int,
        prompt: str,
        prompt_ids: list,
        params: SamplingParams,
        tokenizer,
        events,
        loop,
        cancel: threading.Event,
        deadline: float | None,
        logprobs: int | None,
        echo: bool,
    ):
        self.index, self.prompt, self.tokenizer, self.events, self.loop = index, prompt, tokenizer, events, loop
        self.echo, self.text = echo, TextStream(tokenizer, params.stop_strings)
        self.entries = []  # logprob entries not yet sent
        # Generated tokens' entries wait here, with where their text starts in the generated text, until
        # that text is known to be returned: a token whose text starts at or after a stop string's cut
        # is neither reported nor counted (`dropped`), so logprobs and usage match the text.
        self.held, self.dropped = [], 0
        self.offset = len(prompt) if echo else 0  # where the next token's text starts in the choice's text
        self.seq = Sequence(
            prompt_ids,
            params,
            self._on_token,
            self._on_finish,
            logprobs=logprobs,
            prompt_logprobs=echo and logprobs is not None,
            deadline=deadline,
            cancel=cancel,
        )
        self.echoed = False

    def _token_text(self, token: int) -> str:
        return self.tokenizer.decode_bytes([token]).decode("utf-8", errors="replace")

    def _entry(self, token: int, logprob):
        top = [] if logprob is None else [self._token_text(t) for t, _ in logprob.top]
        return (self._token_text(token), logprob, None, top)

    def _post(self, item) -> None:
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, item)
        except RuntimeError:  # the event loop has closed: nobody is listening any more
            self.seq.cancel.set()

    def _echo_once(self) -> None:
        """With echo, the prompt (and its tokens' logprobs) goes out first."""
        if self.echo and not self.echoed:
            self.echoed = True
            if self.seq.logprobs is not None:
                offset = 0
                for token, logprob in zip(self.seq.prompt, self.seq.prompt_logprobs_out):
                    text, _, _, top = self._entry(token, logprob)
                    self.entries.append((text, logprob, offset, top))
                    offset += len(text)
            self._post(("text", self.index, self.prompt, self._take_entries()))

    def _take_entries(self) -> list:
        entries, self.entries = self.entries, []
        return entries

    def _release(self, returned: int) -> None:
        """Move the held entries whose text starts within the first `returned` characters."""
        while self.held and self.held[0][0] < returned:
            self.entries.append(self.held.pop(0)[1])

    def _on_token(self, seq, token: int, logprob) -> bool:
        self._echo_once()
        before = len(self.text.text)
        piece, stopped = self.text.push(token)
        if seq.logprobs is not None:
            text, lp, _, top = self._entry(token, logprob)
            self.held.append((before, (text, lp, self.offset + before, top)))
        else:
            self.held.append((before, None))
        self._release(self.text.emitted)
        self.entries = [e for e in self.entries if e is not None]
        if piece or self.entries:
            self._post(("text", self.index, piece, self._take_entries()))
        return not stopped

    def _on_finish(self, seq, reason: str) -> None:
        self._echo_once()
        piece = self.text.finish()
        if self.text.stopped:
            reason = "stop"
        self._release(len(self.text.visible))
        self.dropped, self.held = len(self.held), []
        if seq.stop_token is not None and seq.logprobs is not None:
            # The stop token that ended the choice has no text, but its log-probability is listed (as
            # vLLM lists it): a client that scores a prompt with max_tokens 1 (lm-eval-harness) drops
            # the last entry as the generated token, which must be there.
            text, lp, _, top = self._entry(*seq.stop_token)
            self.entries.append(("", lp, self.offset + len(self.text.visible), top))
        self.entries = [e for e in self.entries if e is not None]
        self._post(("end", self.index, reason, piece, self._take_entries()))

    def completion_tokens(self) -> int:
        """The generated tokens whose text the answer returns, and the stop token that ended it."""
        return self.seq.generated - self.dropped + (self.seq.stop_token is not None)


def _max_token_bytes(tokenizer) -> int | None:
    """The most bytes one token stands for (None when the tokenizer does not say): a special token's
    text in a prompt is one token too."""
    table = getattr(tokenizer, "token_bytes", None)
    if not table:
        return None
    specials = getattr(tokenizer, "special_tokens", None) or {}
    return max([len(b) for b in table.values()] + [len(s.encode("utf-8")) for s in specials])


class Requests:
    """The server's side of the queue: admits a request's choices to the scheduler (or refuses them
    with a RequestError), and waits for their ends."""

    def __init__(self, generator, scheduler, request_timeout: float | None):
        self.generator, self.scheduler, self.request_timeout = generator, scheduler, request_timeout
        self.tokenizer = generator.tokenizer
        self.context = generator.model.config.seq_len
        self.bytes_per_token = _max_token_bytes(self.tokenizer)

    def encode(self, prompt, split_special_tokens: bool = False, scored: bool = False) -> list:
        """The prompt's token ids (a list of ids is checked and kept). scored: the prompt is only scored
        (max_tokens 0), so it may fill the whole context."""
        context, bytes_per_token = self.context + (1 if scored else 0), self.bytes_per_token
        if not prompt:
            raise RequestError(400, "prompt must not be empty", "prompt", "empty_prompt")
        if not isinstance(prompt, str):
            vocab = self.tokenizer.vocab_size
            bad = next((t for t in prompt if not 0 <= t < vocab), None)
            if bad is not None:
                raise RequestError(
                    400, f"token id {bad} is not in the vocabulary (0..{vocab - 1})", "prompt", "invalid_prompt"
                )
            if len(prompt) >= context:
                raise RequestError(
                    400,
                    f"the prompt is {len(prompt)} tokens; the model's context is {self.context} tokens",
                    "prompt",
                    "context_length_exceeded",
                )
            return list(prompt)
        try:
            prompt_bytes = len(prompt.encode("utf-8"))
        except UnicodeEncodeError:
            raise RequestError(400, "prompt is not valid Unicode (a lone surrogate)", "prompt", "invalid_prompt")
        # Refuse a prompt whose length alone proves it too long, before encoding it whole.
        if bytes_per_token and -(-prompt_bytes // bytes_per_token) >= context:
            raise RequestError(
                400,
                f"the prompt is {prompt_bytes} bytes, at least "
                f"{-(-prompt_bytes // bytes_per_token)} tokens; the model's context is "
                f"{self.context} tokens",
                "prompt",
                "context_length_exceeded",
            )
        try:
            ids = self.generator.encode_prompt(prompt, split_special_tokens)
        except UserError as e:
            raise RequestError(400, str(e), "prompt")
        if len(ids) >= context:
            raise RequestError(
                400,
                f"the prompt is {len(ids)} tokens; the model's context is {self.context} tokens",
                "prompt",
                "context_length_exceeded",
            )
        return ids

    def start(self, request, loop, req, prompts: list, max_tokens: int | None, stops: tuple, logprobs, echo: bool):
        """Encode the prompts and queue one sequence per (prompt, choice). Returns (choices, events,
        prompt token count)."""
        context, request_timeout, generator = self.context, self.request_timeout, self.generator
        crop = getattr(req, "context", "stop") == "crop"  # past the context: no bound from it
        if max_tokens is not None and max_tokens > context and not crop:
            raise RequestError(
                400,
                f"max_tokens must be at most the context length {context}, got {max_tokens}",
                "max_tokens",
                "less_than_equal",
            )
        vocab = self.tokenizer.vocab_size
        bias = {int(k): v for k, v in (req.logit_bias or {}).items()}
        if any(k >= vocab for k in bias):
            raise RequestError(
                400, f"logit_bias names token {max(bias)}; the vocabulary has {vocab} tokens", "logit_bias"
            )
        encoded = [self.encode(p, req.split_special_tokens, scored=max_tokens == 0) for p in prompts]
        texts = [p if isinstance(p, str) else self.tokenizer.decode(p) for p in prompts]
        state = request.scope.setdefault("state", {})
        cancel = state.get("gc_cancel") or threading.Event()
        if cancel.is_set():
            raise _Cancelled
        events: asyncio.Queue = asyncio.Queue()
        deadline = None if request_timeout is None else time.monotonic() + request_timeout
        choices = []
        for p, (prompt, ids) in enumerate(zip(texts, encoded)):
            for i in range(req.n):
                params = SamplingParams(
                    max_tokens=context if max_tokens is None else max_tokens,
                    temperature=req.temperature,
                    top_k=req.top_k,
                    top_p=req.top_p,
                    seed=None if req.seed is None else req.seed + i,
                    stop_ids=generator.stop_ids(),
                    stop_strings=stops,
                    frequency_penalty=req.frequency_penalty or 0.0,
                    presence_penalty=req.presence_penalty or 0.0,
                    repetition_penalty=1.0 if req.repetition_penalty is None else req.repetition_penalty,
                    logit_bias=bias or None,
                    min_p=req.min_p or 0.0,
                    context="crop" if crop else "stop",
                )
                choices.append(
                    _Choice(
                        len(choices),
                        prompt,
                        ids,
                        params,
                        self.tokenizer,
                        events,
                        loop,
                        cancel,
                        deadline,
                        logprobs,
                        echo,
                    )
                )
        room = self.scheduler.max_queue + self.scheduler.slots
        if len(choices) > room:  # never fits, however long the client waits: not a 429 to retry
            raise RequestError(
                400,
                f"the request asks for {len(choices)} sequences (prompts x n); this server holds at most "
                f"{room} at once (--max_batch + --max_queue); send fewer prompts or a smaller n",
                code="request_too_large",
            )
        try:
            self.scheduler.submit([c.seq for c in choices])
        except QueueFull as e:
            raise RequestError(
                429,
                f"the server is busy ({e}); retry shortly",
                code="queue_full",
                kind="rate_limit_error",
                headers={"Retry-After": "1"},
            )
        except SchedulerClosed as e:
            raise RequestError(503, f"the server cannot generate ({e})", code="unavailable", kind="server_error")
        return choices, events, sum(len(ids) for ids in encoded)

    async def admit(self, request, *args):
        """start() off the event loop (encoding a long prompt takes a while). Returns (the request's
        log state, choices, events); the prompt token count goes into the state. A client that left
        is refused with the 499 answer."""
        from starlette.concurrency import run_in_threadpool

        state = request.scope.setdefault("state", {})
        try:
            choices, events, prompt_tokens = await run_in_threadpool(
                self.start, request, asyncio.get_running_loop(), *args
            )
        except _Cancelled:
            raise cancelled(state) from None
        state["gc_prompt_tokens"] = prompt_tokens
        return state, choices, events

    async def collect(self, choices, events, state):
        """Wait for every choice to end: (texts, reasons, logprob entries per choice); a RequestError
        when one did not end normally."""
        texts, entries, reasons = [""] * len(choices), [[] for _ in choices], [None] * len(choices)
        cancel = choices[0].seq.cancel
        try:
            while any(r is None for r in reasons):
                item = await events.get()
                texts[item[1]] += item[2] if item[0] == "text" else item[3]
                entries[item[1]] += item[-1]
                if item[0] == "end":
                    reasons[item[1]] = item[2]
        finally:
            cancel.set()  # a no-op when all ended; stops the rest when this handler is cancelled or fails
        refused = self.failure(reasons, state, choices)
        if refused is not None:
            raise refused
        return texts, reasons, entries

    def failure(self, reasons, state, choices=()) -> RequestError | None:
        """The refusal for choices that did not end normally, or None."""
        if CANCELLED in reasons:
            return cancelled(state)
        if TIMEOUT in reasons:
            return RequestError(
                503,
                f"the request did not finish within the server's limit of {self.request_timeout:g} s "
                "(--request_timeout)",
                kind="server_error",
                code="timeout",
            )
        if ERROR in reasons:
            failed = next((c.seq.error for c in choices if c.seq.error), None)
            return RequestError(500, failed or self.scheduler.failure or "generation failed", kind="server_error")
        return None


def cancelled(state) -> RequestError:
    """The client closed the request (logged as cancelled; its answer, 499, is never read)."""
    state["gc_outcome"] = "cancelled"
    return RequestError(499, "the client closed the request", code="client_closed_request")
