"""An OpenAI-compatible completions server (FastAPI + uvicorn) that serves many users at once.

    POST /v1/completions        {"prompt": "..." or ["...", ...], "max_tokens": 64, "temperature": 0.8,
                                 "top_k": 40, "top_p": 0.95, "stop": ["\\n\\n"], "seed": 1, "n": 2,
                                 "logprobs": 3, "echo": false, "stream": false}
    POST /v1/chat/completions   {"messages": [{"role": "user", "content": "..."}], ...the same sampling fields,
                                 "logprobs": true, "top_logprobs": 3}
    GET  /v1/models             the model's name, parameter count, context length and tokenizer
    GET  /health
    GET  /                      the browser playground (static/playground.html; off with ui=False)

The model is loaded once and driven by one Scheduler (inference/scheduler.py): concurrent requests
are batched continuously (each joins the running batch at the next decoding step and leaves when it
ends) over a KV cache of fixed slots. Each choice of a request is one sequence with its own random
generator: choice i samples with `seed + i`, so an answer does not depend on what else is running.
Streaming answers are server-sent events; the last event before `[DONE]` carries `usage`.

Every request passes through `_Front` (a plain ASGI layer, inference/http_front.py) first: it checks
the API key (when the server has one; `Authorization: Bearer <key>` on /v1/ paths), reads the body (refusing one over
`max_body_bytes` with a 413), watches the connection for the client going away (which cancels the
request's sequences: a waiting one never starts, a running one leaves the batch at the next step),
and writes one access-log line (method, path, status, duration, tokens).

Every error answer has OpenAI's shape:
    {"error": {"message": "...", "type": "invalid_request_error", "param": "top_p", "code": "..."}}
400 for a body that is not JSON and for a prompt longer than the context, 401 for a missing or
wrong API key, 413 for a body over the limit, 422 for a parameter of the wrong type or out of range,
404/405 for unknown paths and methods, 429 when the waiting line is full, 503 when a request runs
past the server's time limit (or the generator has failed), 500 (type server_error) for a failure
inside the server.
"""

import asyncio
import json
import logging
import socket
import threading
import time

from gradcraft.errors import UserError
from gradcraft.inference.generate import SamplingParams
from gradcraft.inference.http_front import _Cancelled, _Front, _StderrHandler, bind, error_body, log
from gradcraft.inference.scheduler import CANCELLED, ERROR, TIMEOUT, QueueFull, Scheduler, SchedulerClosed, Sequence
from gradcraft.inference.text import TextStream

MAX_BODY_BYTES = 1_000_000  # default request-body limit (--max_body_bytes)
SLOTS = 16  # default sequences decoded together (--max_batch)
MAX_QUEUE = 256  # default sequences waiting for a slot (--max_queue)
REQUEST_TIMEOUT = 600.0  # default seconds a request may take, waiting included (--request_timeout)


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

    def _on_token(self, seq, token: int, logprob) -> bool:
        self._echo_once()
        before = len(self.text.text)
        piece, stopped = self.text.push(token)
        if seq.logprobs is not None:
            text, lp, _, top = self._entry(token, logprob)
            self.entries.append((text, lp, self.offset + before, top))
        if piece or self.entries:
            self._post(("text", self.index, piece, self._take_entries()))
        return not stopped

    def _on_finish(self, seq, reason: str) -> None:
        self._echo_once()
        piece = self.text.finish()
        if self.text.stopped:
            reason = "stop"
        self._post(("end", self.index, reason, piece, self._take_entries()))


def _max_token_bytes(tokenizer) -> int | None:
    """The most bytes one token stands for (None when the tokenizer does not say)."""
    table = getattr(tokenizer, "token_bytes", None)
    if not table:
        return None
    return max(len(b) for b in table.values())


def model_card(generator, model_name: str, context: int) -> dict:
    """The model's /v1/models entry: OpenAI's fields, then gradcraft's (additive) facts about it, each
    only when the generator's model and tokenizer can tell it."""
    card = {"id": model_name, "object": "model", "owned_by": "gradcraft", "context_length": context}
    count = getattr(generator.model, "num_parameters", None)
    if count is not None:
        card["parameters"] = count()
    tokenizer = getattr(generator, "tokenizer", None)
    if getattr(tokenizer, "vocab_size", None) is not None:
        card["tokenizer"] = {
            "type": "bpe",
            "vocab_size": tokenizer.vocab_size,
            "pattern": getattr(tokenizer, "pattern_name", None),
            "fingerprint": getattr(tokenizer, "fingerprint", None),
        }
    return card


def playground_page() -> bytes:
    """The browser playground: one self-contained HTML file shipped in the package."""
    from importlib.resources import files

    return (files("gradcraft.inference") / "static" / "playground.html").read_bytes()


# The page loads nothing from anywhere but this server (no CDN): the browser enforces it.
PLAYGROUND_CSP = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
    "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'"
)


def create_app(
    generator,
    model_name: str,
    *,
    max_body_bytes: int = MAX_BODY_BYTES,
    docs: bool = False,
    slots: int = SLOTS,
    max_queue: int = MAX_QUEUE,
    request_timeout: float | None = REQUEST_TIMEOUT,
    api_key: str | None = None,
    prefill_chunk: int = 256,
    ui: bool = True,
):
    """The ASGI app (its `.scheduler` drives the model). docs: serve /docs and /openapi.json (off by
    default). api_key: demand `Authorization: Bearer <api_key>` on the /v1/ paths. ui: serve the
    playground at /."""
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, Response, StreamingResponse
    from starlette.concurrency import run_in_threadpool
    from starlette.exceptions import HTTPException as StarletteHTTPException

    from gradcraft.inference import openai_api as api

    context = generator.model.config.seq_len
    tokenizer = generator.tokenizer
    bytes_per_token = _max_token_bytes(tokenizer)
    scheduler = Scheduler(generator.model, slots=slots, max_queue=max_queue, prefill_chunk=prefill_chunk)

    app = FastAPI(
        title="gradcraft",
        version="0.1.0",
        docs_url="/docs" if docs else None,
        redoc_url=None,
        openapi_url="/openapi.json" if docs else None,
    )

    # ------------------------------------------------------------------ errors, all in OpenAI's shape

    def error(
        status: int,
        message: str,
        kind: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers=None,
    ):
        return JSONResponse(status_code=status, content=error_body(message, kind, param, code), headers=headers)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError):
        errors = exc.errors()
        first = errors[0] if errors else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or None
        kind = first.get("type", "invalid")
        message = f"{where or 'body'}: {first.get('msg', 'invalid request')}"
        if where is None and kind in ("model_attributes_type", "missing"):
            return error(422, "the body must be a JSON object (sent with Content-Type: application/json)", code=kind)
        if kind == "json_invalid":
            return error(
                400,
                f"the body is not valid JSON: {first.get('ctx', {}).get('error', 'parse error')}",
                code="json_invalid",
            )
        return error(422, message, param=where.split(".")[0] if where else None, code=kind)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        return error(
            exc.status_code,
            str(exc.detail),
            code="not_found" if exc.status_code == 404 else None,
            headers=getattr(exc, "headers", None),
        )

    @app.exception_handler(RequestError)
    async def refused(request: Request, exc: RequestError):
        return error(exc.status, exc.message, kind=exc.kind, param=exc.param, code=exc.code, headers=exc.headers)

    @app.exception_handler(Exception)
    async def server_error(request: Request, exc: Exception):
        return error(500, "internal server error", kind="server_error")

    # ------------------------------------------------------------------ requests into sequences

    def encode(prompt: str) -> list:
        if not prompt:
            raise RequestError(422, "prompt must not be empty", "prompt", "empty_prompt")
        try:
            prompt_bytes = len(prompt.encode("utf-8"))
        except UnicodeEncodeError:
            raise RequestError(422, "prompt is not valid Unicode (a lone surrogate)", "prompt", "invalid_prompt")
        # Refuse a prompt whose length alone proves it too long, before encoding it whole.
        if bytes_per_token and -(-prompt_bytes // bytes_per_token) >= context:
            raise RequestError(
                400,
                f"the prompt is {prompt_bytes} bytes, at least "
                f"{-(-prompt_bytes // bytes_per_token)} tokens; the model's context is "
                f"{context} tokens",
                "prompt",
                "context_length_exceeded",
            )
        try:
            ids = generator.encode_prompt(prompt)
        except UserError as e:
            raise RequestError(422, str(e), "prompt")
        if len(ids) >= context:
            raise RequestError(
                400,
                f"the prompt is {len(ids)} tokens; the model's context is {context} tokens",
                "prompt",
                "context_length_exceeded",
            )
        return ids

    def start(request: Request, loop, req, prompts: list, max_tokens: int | None, stops: tuple, logprobs, echo: bool):
        """Encode the prompts and queue one sequence per (prompt, choice). Returns (choices, events,
        prompt token count)."""
        if max_tokens is not None and max_tokens > context:
            raise RequestError(
                422,
                f"max_tokens must be at most the context length {context}, got {max_tokens}",
                "max_tokens",
                "less_than_equal",
            )
        encoded = [encode(p) for p in prompts]
        state = request.scope.setdefault("state", {})
        cancel = state.get("gc_cancel") or threading.Event()
        if cancel.is_set():
            raise _Cancelled
        events: asyncio.Queue = asyncio.Queue()
        deadline = None if request_timeout is None else time.monotonic() + request_timeout
        choices = []
        for p, (prompt, ids) in enumerate(zip(prompts, encoded)):
            for i in range(req.n):
                params = SamplingParams(
                    max_tokens=max_tokens or context,
                    temperature=req.temperature,
                    top_k=req.top_k,
                    top_p=req.top_p,
                    seed=None if req.seed is None else req.seed + i,
                    stop_ids=generator.stop_ids(),
                    stop_strings=stops,
                )
                choices.append(
                    _Choice(
                        len(choices), prompt, ids, params, tokenizer, events, loop, cancel, deadline, logprobs, echo
                    )
                )
        try:
            scheduler.submit([c.seq for c in choices])
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

    async def admit(request: Request, *args):
        """start() off the event loop (encoding a long prompt takes a while); None if the client left."""
        try:
            return await run_in_threadpool(start, request, asyncio.get_running_loop(), *args)
        except _Cancelled:
            return None

    async def collect(choices, events, state):
        """Wait for every choice to end: (texts, reasons, logprob entries per choice) or an error answer."""
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
        return texts, reasons, entries

    def failure(reasons, state, choices=()):
        """The error answer for choices that did not end normally, or None."""
        if CANCELLED in reasons:
            state["gc_outcome"] = "cancelled"
            return error(499, "the client closed the request", code="client_closed_request")
        if TIMEOUT in reasons:
            return error(
                503,
                f"the request did not finish within the server's limit of {request_timeout:g} s (--request_timeout)",
                kind="server_error",
                code="timeout",
            )
        if ERROR in reasons:
            failed = next((c.seq.error for c in choices if c.seq.error), None)
            return error(500, failed or scheduler.failure or "generation failed", kind="server_error")
        return None

    def stream_events(choices, events, state, chunk, last_chunk):
        """Server-sent events: chunk(index, piece, entries) per piece of text, last_chunk(index, reason,
        piece, entries) per ending (the final one carries usage), then [DONE]."""

        async def generate():
            open_choices, finished = len(choices), False
            try:
                while open_choices:
                    item = await events.get()
                    if item[0] == "text":
                        yield f"data: {json.dumps(chunk(item[1], item[2], item[3]))}\n\n"
                        continue
                    _, index, reason, piece, entries = item
                    open_choices -= 1
                    if reason in (CANCELLED, TIMEOUT, ERROR):
                        if reason == CANCELLED:
                            return
                        message = failure([reason], state, choices).body.decode()
                        yield f"data: {message}\n\n"  # the status line has gone out: the error goes in the stream
                        break
                    body = last_chunk(index, reason, piece, entries)
                    if open_choices == 0:
                        completion = sum(c.seq.generated for c in choices)
                        body["usage"] = api.usage(state["gc_prompt_tokens"], completion)
                        state["gc_usage"] = (state["gc_prompt_tokens"], completion)
                    yield f"data: {json.dumps(body)}\n\n"
                finished = True
                yield "data: [DONE]\n\n"
            finally:
                if not finished:
                    state["gc_outcome"] = "cancelled"
                choices[0].seq.cancel.set()  # the client left (or the stream ended): stop the generation

        return StreamingResponse(generate(), media_type="text/event-stream")

    # ------------------------------------------------------------------ routes

    @app.get("/health")
    def health():
        return {"status": "ok"}

    card = model_card(generator, model_name, context)

    @app.get("/v1/models")
    def models():
        return {"object": "list", "data": [card]}

    if ui:
        page = playground_page()  # read now: a broken install fails at start, not on the first visit

        @app.get("/", include_in_schema=False)
        def playground():
            return Response(
                page,
                media_type="text/html; charset=utf-8",
                headers={"Content-Security-Policy": PLAYGROUND_CSP, "Cache-Control": "no-cache"},
            )

    @app.post("/v1/completions")
    async def completions(req: api.CompletionRequest, request: Request):
        state = request.scope.setdefault("state", {})
        started = await admit(request, req, req.prompts(), req.max_tokens, req.stop_strings(), req.logprobs, req.echo)
        if started is None:
            state["gc_outcome"] = "cancelled"
            return error(499, "the client closed the request", code="client_closed_request")
        choices, events, prompt_tokens = started
        state["gc_prompt_tokens"] = prompt_tokens
        rid, created = api.new_id("cmpl")

        def body(index, text, reason, entries):
            logprobs = None if req.logprobs is None else api.completion_logprobs(entries)
            return {
                "id": rid,
                "object": "text_completion",
                "created": created,
                "model": model_name,
                "choices": [
                    {"text": text, "index": index, "logprobs": logprobs, "finish_reason": api.finish_reason(reason)}
                ],
            }

        if req.stream:
            return stream_events(
                choices,
                events,
                state,
                lambda i, piece, e: body(i, piece, None, e),
                lambda i, reason, piece, e: body(i, piece, reason, e),
            )
        texts, reasons, entries = await collect(choices, events, state)
        refused = failure(reasons, state, choices)
        if refused is not None:
            return refused
        completion = sum(c.seq.generated for c in choices)
        state["gc_usage"] = (prompt_tokens, completion)
        out = body(0, "", None, [])
        out["choices"] = [body(i, texts[i], reasons[i], entries[i])["choices"][0] for i in range(len(choices))]
        out["usage"] = api.usage(prompt_tokens, completion)
        return out

    @app.post("/v1/chat/completions")
    async def chat_completions(req: api.ChatRequest, request: Request):
        state = request.scope.setdefault("state", {})
        top = (req.top_logprobs or 0) if req.logprobs else None
        stops = req.stop_strings() + (api.CHAT_STOP,)
        started = await admit(
            request, req, [req.prompt()], req.max_completion_tokens or req.max_tokens, stops, top, False
        )
        if started is None:
            state["gc_outcome"] = "cancelled"
            return error(499, "the client closed the request", code="client_closed_request")
        choices, events, prompt_tokens = started
        state["gc_prompt_tokens"] = prompt_tokens
        rid, created = api.new_id("chatcmpl")

        def envelope(kind, choice_list):
            return {"id": rid, "object": kind, "created": created, "model": model_name, "choices": choice_list}

        def chunk(index, piece, entries, reason=None, first=False):
            delta = {"role": "assistant", "content": piece} if first else ({"content": piece} if piece else {})
            logprobs = api.chat_logprobs(entries) if top is not None else None
            return envelope(
                "chat.completion.chunk",
                [{"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": api.finish_reason(reason)}],
            )

        if req.stream:
            greeted = set()

            def piece_chunk(i, piece, entries):
                first = i not in greeted
                greeted.add(i)
                return chunk(i, piece, entries, first=first)

            return stream_events(
                choices,
                events,
                state,
                piece_chunk,
                lambda i, reason, piece, e: chunk(i, piece, e, reason, first=i not in greeted),
            )
        texts, reasons, entries = await collect(choices, events, state)
        refused = failure(reasons, state, choices)
        if refused is not None:
            return refused
        completion = sum(c.seq.generated for c in choices)
        state["gc_usage"] = (prompt_tokens, completion)
        out = envelope(
            "chat.completion",
            [
                {
                    "index": i,
                    "message": {"role": "assistant", "content": texts[i]},
                    "logprobs": api.chat_logprobs(entries[i]) if top is not None else None,
                    "finish_reason": api.finish_reason(reasons[i]),
                }
                for i in range(len(choices))
            ],
        )
        out["usage"] = api.usage(prompt_tokens, completion)
        return out

    front = _Front(app, max_body_bytes, api_key)
    front.scheduler = scheduler
    return front


def serve(
    generator,
    model_name: str,
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    sock: socket.socket | None = None,
    access_log: bool = True,
    **app_options,
) -> None:
    """Serve until interrupted. sock: an already bound socket (see bind); else host:port is bound here.
    app_options: create_app's (max_body_bytes, docs, slots, max_queue, request_timeout, api_key, ...)."""
    import uvicorn

    if access_log and not log.handlers:
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False
    sock = sock or bind(host, port)
    app = create_app(generator, model_name, **app_options)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False)
    uvicorn.Server(config).run(sockets=[sock])
