"""An OpenAI-compatible completions server (FastAPI + uvicorn).

    POST /v1/completions   {"prompt": "...", "max_tokens": 64, "temperature": 0.8, "top_k": 40, "top_p": 0.95,
                            "stop": ["\\n\\n"], "seed": 1, "stream": false}
    GET  /v1/models        the model's name, parameter count, context length and tokenizer
    GET  /health
    GET  /                 the browser playground (static/playground.html; off with ui=False)

The model is loaded once. Requests are served one at a time, in arrival order,
by a single generation worker thread (`_Engine`), so concurrent requests can
never share or corrupt a KV cache; each request has its own caches and its own
random generator, so its answer does not depend on what else is running.
Streaming responses are server-sent events.

Every request passes through `_Front` (a plain ASGI layer) first: it reads the
body (refusing one over `max_body_bytes` with a 413), watches the connection
for the client going away (which cancels the request's generation: a queued
request is skipped, a running one stops at its next piece of text), and writes
one access-log line (method, path, status, duration, tokens).

Every error answer has OpenAI's shape:
    {"error": {"message": "...", "type": "invalid_request_error", "param": "top_p", "code": "..."}}
400 for a body that is not JSON and for a prompt longer than the context, 413
for a body over the limit, 422 for a parameter of the wrong type or out of
range, 404/405 for unknown paths and methods, 500 (type server_error) for a
failure inside the server.
"""

import asyncio
import json
import logging
import queue
import socket
import threading
import time
import uuid

from gradcraft.errors import UserError
from gradcraft.inference.generate import SamplingParams

MAX_BODY_BYTES = 1_000_000  # default request-body limit (--max_body_bytes)
MAX_PROMPT_CHARS = 1_000_000
MAX_STOP_STRINGS = 4  # as OpenAI
MAX_STOP_CHARS = 256
MIN_TEMPERATURE = 1e-6  # a positive temperature below this overflows logits / T (0 means greedy)
MAX_TEMPERATURE = 100.0
MAX_TOP_K = 2**31 - 1
MAX_SEED = 2**63 - 1

log = logging.getLogger("gradcraft.server")


def error_body(message: str, kind: str = "invalid_request_error", param: str | None = None,
               code: str | None = None) -> dict:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


class RequestError(Exception):
    """A request the server refuses: becomes an HTTP answer with OpenAI's error shape."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code


class _Cancelled(Exception):
    """Raised inside the generation callback when the request's client has gone."""


class _Job:
    """One request's generation, handed from the event loop to the engine thread and back."""

    def __init__(self, prompt: str, params: SamplingParams, cancel: threading.Event, stream: bool):
        self.prompt, self.params, self.cancel, self.stream = prompt, params, cancel, stream
        self.loop = asyncio.get_running_loop()
        self.events: asyncio.Queue = asyncio.Queue()  # text pieces (streaming), then one outcome tuple

    def _post(self, item) -> None:
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, item)
        except RuntimeError:  # the event loop has closed: nobody is listening any more
            self.cancel.set()

    def on_text(self, _, piece: str) -> None:
        if self.cancel.is_set():
            raise _Cancelled
        if self.stream:
            self._post(piece)

    def finish(self, kind: str, value=None) -> None:
        self._post((kind, value))


class _Engine:
    """The one generation worker: jobs run one at a time, in arrival order."""

    def __init__(self, generator):
        self.generator = generator
        self.jobs: queue.Queue = queue.Queue()
        threading.Thread(target=self._run, name="gradcraft-engine", daemon=True).start()

    def submit(self, job: _Job) -> None:
        self.jobs.put(job)

    def _run(self) -> None:
        while True:
            job = self.jobs.get()
            if job.cancel.is_set():  # its client left while it waited: never start it
                job.finish("cancelled")
                continue
            try:
                texts, reasons = self.generator.complete([job.prompt], job.params, job.on_text)
                job.finish("done", (texts[0], reasons[0], self.generator.last_token_counts[0]))
            except _Cancelled:
                job.finish("cancelled")
            except Exception as e:  # noqa: BLE001 (reported to the client; the worker keeps serving)
                log.exception("generation failed")
                job.finish("error", f"generation failed: {e}")


def _header(scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return value
    return None


async def _send_json(send, status: int, content: dict) -> None:
    body = json.dumps(content).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body, "more_body": False})


class _Front:
    """ASGI layer in front of the app: body limit, disconnect watch, access log."""

    def __init__(self, app, max_body_bytes: int):
        self.app, self.max_body_bytes = app, max_body_bytes

    async def _read_body(self, scope, receive) -> bytes | None:
        """The whole body, or None when it is over the limit; raises _Cancelled if the client leaves."""
        declared = _header(scope, b"content-length")
        if declared is not None and (not declared.strip().isdigit() or int(declared) > self.max_body_bytes):
            return None
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _Cancelled
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start = time.perf_counter()
        state = scope.setdefault("state", {})
        cancel = state["gc_cancel"] = threading.Event()
        status = [None]

        async def send_logged(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        watcher = None
        try:
            try:
                body = await self._read_body(scope, receive)
            except _Cancelled:
                state["gc_outcome"] = "cancelled"
                return
            if body is None:
                await _send_json(send_logged, 413, error_body(
                    f"the request body is over the server's limit of {self.max_body_bytes} bytes",
                    code="request_too_large"))
                return
            gone = asyncio.Event()

            async def watch():  # the only reader of `receive` from here on
                while (await receive())["type"] != "http.disconnect":
                    pass
                cancel.set()
                gone.set()

            watcher = asyncio.ensure_future(watch())
            replayed = False

            async def replay():
                nonlocal replayed
                if not replayed:
                    replayed = True
                    return {"type": "http.request", "body": body, "more_body": False}
                await gone.wait()
                return {"type": "http.disconnect"}

            await self.app(scope, replay, send_logged)
        finally:
            if watcher is not None:
                watcher.cancel()
            self._log(scope, state, status[0], time.perf_counter() - start)

    @staticmethod
    def _log(scope, state, status, seconds) -> None:
        if not log.isEnabledFor(logging.INFO):
            return
        client = scope.get("client")
        usage = state.get("gc_usage")
        tokens = "" if usage is None else f" prompt_tokens={usage[0]} completion_tokens={usage[1]}"
        outcome = state.get("gc_outcome")
        note = " cancelled (client disconnected)" if outcome == "cancelled" else ""
        query = scope.get("query_string", b"")
        path = scope.get("path", "") + ("?" + query.decode("latin-1") if query else "")
        log.info("%s %s %s %s %.3fs%s%s", client[0] if client else "-", scope.get("method"), path,
                 status if status is not None else "-", seconds, tokens, note)


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
        card["tokenizer"] = {"type": "bpe", "vocab_size": tokenizer.vocab_size,
                             "pattern": getattr(tokenizer, "pattern_name", None),
                             "fingerprint": getattr(tokenizer, "fingerprint", None)}
    return card


def playground_page() -> bytes:
    """The browser playground: one self-contained HTML file shipped in the package."""
    from importlib.resources import files
    return (files("gradcraft.inference") / "static" / "playground.html").read_bytes()


# The page loads nothing from anywhere but this server (no CDN): the browser enforces it.
PLAYGROUND_CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                  "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'")


def create_app(generator, model_name: str, *, max_body_bytes: int = MAX_BODY_BYTES, docs: bool = False,
               ui: bool = True):
    """The ASGI app. docs: serve /docs and /openapi.json (off by default). ui: serve the playground at /."""
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, Response, StreamingResponse
    from pydantic import BaseModel, Field, field_validator
    from starlette.concurrency import run_in_threadpool
    from starlette.exceptions import HTTPException as StarletteHTTPException

    context = generator.model.config.seq_len
    bytes_per_token = _max_token_bytes(generator.tokenizer)
    engine = _Engine(generator)

    class CompletionRequest(BaseModel):
        model: str | None = None
        prompt: str = Field(..., max_length=MAX_PROMPT_CHARS)
        max_tokens: int = Field(16, ge=1, le=context)
        temperature: float | None = Field(1.0, ge=0, le=MAX_TEMPERATURE, allow_inf_nan=False)
        top_k: int | None = Field(None, ge=1, le=MAX_TOP_K)
        top_p: float | None = Field(None, gt=0, le=1, allow_inf_nan=False)
        stop: str | list[str] | None = None
        seed: int | None = Field(None, ge=0, le=MAX_SEED)
        stream: bool = False
        model_config = {"extra": "ignore", "strict": True}

        @field_validator("temperature")
        @classmethod
        def _temperature(cls, value):
            if value is not None and 0 < value < MIN_TEMPERATURE:
                raise ValueError(f"must be 0 (greedy) or at least {MIN_TEMPERATURE}")
            return value

        @field_validator("stop")
        @classmethod
        def _stop(cls, value):
            stops = [value] if isinstance(value, str) else list(value or ())
            if len(stops) > MAX_STOP_STRINGS:
                raise ValueError(f"at most {MAX_STOP_STRINGS} stop strings, got {len(stops)}")
            if any(len(s) > MAX_STOP_CHARS for s in stops):
                raise ValueError(f"a stop string is at most {MAX_STOP_CHARS} characters")
            return value

    app = FastAPI(title="gradcraft", version="0.1.0", docs_url="/docs" if docs else None, redoc_url=None,
                  openapi_url="/openapi.json" if docs else None)

    def error(status: int, message: str, kind: str = "invalid_request_error", param: str | None = None,
              code: str | None = None, headers=None):
        return JSONResponse(status_code=status, content=error_body(message, kind, param, code), headers=headers)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError):
        errors = exc.errors()
        first = errors[0] if errors else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or None
        kind = first.get("type", "invalid")
        message = f"{where or 'body'}: {first.get('msg', 'invalid request')}"
        if where is None and kind in ("model_attributes_type", "missing"):
            return error(422, "the body must be a JSON object (sent with Content-Type: application/json)",
                         code=kind)
        if kind == "json_invalid":
            return error(400, f"the body is not valid JSON: {first.get('ctx', {}).get('error', 'parse error')}",
                         code="json_invalid")
        return error(422, message, param=where.split(".")[0] if where else None, code=kind)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        return error(exc.status_code, str(exc.detail), code="not_found" if exc.status_code == 404 else None,
                     headers=getattr(exc, "headers", None))

    @app.exception_handler(RequestError)
    async def refused(request: Request, exc: RequestError):
        return error(exc.status, exc.message, param=exc.param, code=exc.code)

    @app.exception_handler(Exception)
    async def server_error(request: Request, exc: Exception):
        return error(500, "internal server error", kind="server_error")

    def prepare(req: CompletionRequest):
        if not req.prompt:
            raise RequestError(422, "prompt must not be empty", "prompt", "empty_prompt")
        try:
            prompt_bytes = len(req.prompt.encode("utf-8"))
        except UnicodeEncodeError:
            raise RequestError(422, "prompt is not valid Unicode (a lone surrogate)", "prompt", "invalid_prompt")
        # Refuse a prompt whose length alone proves it too long, before encoding it whole.
        if bytes_per_token and -(-prompt_bytes // bytes_per_token) >= context:
            raise RequestError(400, f"the prompt is {prompt_bytes} bytes, at least "
                                    f"{-(-prompt_bytes // bytes_per_token)} tokens; the model's context is "
                                    f"{context} tokens", "prompt", "context_length_exceeded")
        stops = (req.stop,) if isinstance(req.stop, str) else tuple(req.stop or ())
        params = SamplingParams(max_tokens=req.max_tokens, temperature=req.temperature, top_k=req.top_k,
                                top_p=req.top_p, seed=req.seed, stop_strings=stops)
        try:
            params.validate(context)
            prompt_ids = generator.encode_prompt(req.prompt)
        except UserError as e:
            raise RequestError(422, str(e))
        if len(prompt_ids) >= context:
            raise RequestError(400, f"the prompt is {len(prompt_ids)} tokens; the model's context is {context} "
                                    f"tokens", "prompt", "context_length_exceeded")
        return params, len(prompt_ids)

    def body(text: str, reason: str | None, prompt_tokens: int, completion_tokens: int, rid: str, created: int):
        return {"id": rid, "object": "text_completion", "created": created, "model": model_name,
                "choices": [{"text": text, "index": 0, "logprobs": None, "finish_reason": reason}],
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                          "total_tokens": prompt_tokens + completion_tokens}}

    def finish_reason(reason: str) -> str:
        return "stop" if reason == "stop" else "length"

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
            return Response(page, media_type="text/html; charset=utf-8",
                            headers={"Content-Security-Policy": PLAYGROUND_CSP, "Cache-Control": "no-cache"})

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest, request: Request):
        params, prompt_tokens = await run_in_threadpool(prepare, req)
        state = request.scope.setdefault("state", {})
        cancel = state.get("gc_cancel") or threading.Event()
        rid, created = f"cmpl-{uuid.uuid4().hex[:24]}", int(time.time())
        job = _Job(req.prompt, params, cancel, req.stream)
        engine.submit(job)

        if not req.stream:
            try:
                kind, value = await job.events.get()
            finally:
                cancel.set()  # a no-op when it finished; stops it when this handler is cancelled
            if kind == "cancelled":
                state["gc_outcome"] = "cancelled"
                return error(499, "the client closed the request", code="client_closed_request")
            if kind == "error":
                return error(500, value, kind="server_error")
            text, reason, n = value
            state["gc_usage"] = (prompt_tokens, n)
            return body(text, finish_reason(reason), prompt_tokens, n, rid, created)

        async def events():
            finished = False
            try:
                while True:
                    item = await job.events.get()
                    if isinstance(item, str):
                        chunk = body(item, None, prompt_tokens, 0, rid, created)
                        chunk.pop("usage")
                        yield f"data: {json.dumps(chunk)}\n\n"
                        continue
                    kind, value = item
                    if kind == "cancelled":
                        state["gc_outcome"] = "cancelled"
                        return
                    finished = True
                    if kind == "error":  # reported in the stream: the status line has already gone out
                        yield f"data: {json.dumps(error_body(value, 'server_error'))}\n\n"
                    else:
                        _, reason, n = value
                        state["gc_usage"] = (prompt_tokens, n)
                        yield f"data: {json.dumps(body('', finish_reason(reason), prompt_tokens, n, rid, created))}\n\n"
                    yield "data: [DONE]\n\n"
                    return
            finally:
                if not finished:
                    state["gc_outcome"] = "cancelled"
                cancel.set()  # the client left (or the stream ended): stop the generation

        return StreamingResponse(events(), media_type="text/event-stream")

    return _Front(app, max_body_bytes)


def bind(host: str, port: int) -> socket.socket:
    """A socket bound to host:port, or a UserError saying why it cannot be."""
    if not 1 <= port <= 65535:
        raise UserError(f"--port must be between 1 and 65535, got {port}")
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
    except (socket.gaierror, UnicodeError) as e:
        raise UserError(f"cannot resolve --host {host!r}: {getattr(e, 'strerror', None) or e}")
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as e:
        sock.close()
        hint = "; pick another --port" if e.errno in (98, 48) else ""  # EADDRINUSE (Linux, macOS)
        raise UserError(f"cannot listen on {host}:{port}: {e.strerror or e}{hint}")
    sock.set_inheritable(True)
    return sock


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever sys.stderr is when a line is logged, not when the server started (a test
    harness swaps and closes its stderr; the access log must not write to a closed file)."""

    @property
    def stream(self):
        import sys
        return sys.stderr

    @stream.setter
    def stream(self, value):
        pass


def serve(generator, model_name: str, host: str = "127.0.0.1", port: int = 8000, *, sock: socket.socket | None = None,
          max_body_bytes: int = MAX_BODY_BYTES, docs: bool = False, ui: bool = True, access_log: bool = True) -> None:
    """Serve until interrupted. sock: an already bound socket (see bind); else host:port is bound here."""
    import uvicorn

    if access_log and not log.handlers:
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False
    sock = sock or bind(host, port)
    app = create_app(generator, model_name, max_body_bytes=max_body_bytes, docs=docs, ui=ui)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False)
    uvicorn.Server(config).run(sockets=[sock])
