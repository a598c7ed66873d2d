"""An OpenAI-compatible completions server (FastAPI + uvicorn) that serves many users at once.

    POST /v1/completions        {"prompt": "..." or ["...", ...], "max_tokens": 64, "temperature": 0.8,
                                 "top_k": 40, "top_p": 0.95, "stop": ["\\n\\n"], "seed": 1, "n": 2,
                                 "logprobs": 3, "echo": false, "stream": false}
    POST /v1/chat/completions   {"messages": [{"role": "user", "content": "..."}], ...the same sampling fields,
                                 "logprobs": true, "top_logprobs": 3}
    GET  /v1/models             the model's name, parameter count, context length and tokenizer
    GET  /v1/models/{id}        the same entry, or 404 model_not_found
    GET  /health
    GET  /                      the browser playground (static/playground.html; off with ui=False)

The routes live here; a request becomes sequences on the scheduler in inference/admission.py.
The model is loaded once and driven by one Scheduler (inference/batching.py): concurrent requests
are batched continuously (each joins the running batch at the next decoding step and leaves when it
ends) over a KV cache of fixed slots. Each choice of a request is one sequence with its own random
generator: choice i samples with `seed + i`, so an answer does not depend on what else is running.
Streaming answers are server-sent events; with `stream_options.include_usage` a last chunk before `[DONE]`
has no choices and carries `usage`, as OpenAI sends it.

Every request passes through `_Front` (a plain ASGI layer, inference/http_front.py) first: it checks
the API key (when the server has one; `Authorization: Bearer <key>` on /v1/ paths), reads the body (refusing one over
`max_body_bytes` with a 413), watches the connection for the client going away (which cancels the
request's sequences: a waiting one never starts, a running one leaves the batch at the next step),
and writes one access-log line (method, path, status, duration, tokens).

Every error answer has OpenAI's shape:
    {"error": {"message": "...", "type": "invalid_request_error", "param": "top_p", "code": "..."}}
400 for a body that is not JSON, a parameter of the wrong type or out of range (`param` names it), an
OpenAI field the server does not implement, and a prompt longer than the context; 401 for a missing or
wrong API key, 413 for a body over the limit, 404 for a `model` that is not served (model_not_found),
404/405 for unknown paths and methods, 429 when the waiting line is full, 503 when a request runs
past the server's time limit (or the generator has failed), 500 (type server_error) for a failure
inside the server.
"""

import json
import logging
import socket

from gradcraft.inference.admission import RequestError, Requests
from gradcraft.inference.http_front import _Front, _StderrHandler, bind, error_body, log, run_uvicorn
from gradcraft.inference.batching import CANCELLED, ERROR, TIMEOUT, Scheduler

MAX_BODY_BYTES = 1_000_000  # default request-body limit (--max_body_bytes)
SLOTS = 16  # default sequences decoded together (--max_batch)
MAX_QUEUE = 256  # default sequences waiting for a slot (--max_queue)
REQUEST_TIMEOUT = 600.0  # default seconds a request may take, waiting included (--request_timeout)


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
    step_prompts: int | None = None,
    ui: bool = True,
    aliases: tuple = (),
):
    """The ASGI app (its `.scheduler` drives the model). docs: serve /docs and /openapi.json (off by
    default). api_key: demand `Authorization: Bearer <api_key>` on the /v1/ paths. ui: serve the
    playground at /. A request's `model` must be model_name or one of `aliases` (or left out)."""
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, Response, StreamingResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException

    from gradcraft.inference import openai_api as api

    scheduler = Scheduler(
        generator.model, slots=slots, max_queue=max_queue, prefill_chunk=prefill_chunk, step_prompts=step_prompts
    )
    requests = Requests(generator, scheduler, request_timeout)

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
        cause = first.get("ctx", {}).get("error")
        if isinstance(cause, api.UnsupportedField):  # an OpenAI field this server does not implement
            return error(400, str(cause), param=cause.name, code="unsupported_parameter")
        if where is None and kind in ("model_attributes_type", "missing"):
            return error(400, "the body must be a JSON object", code=kind)
        if kind == "json_invalid":
            return error(400, f"the body is not valid JSON: {cause or 'parse error'}", code="json_invalid")
        return error(400, message, param=where.split(".")[0] if where else None, code=kind)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        return error(
            exc.status_code,
            str(exc.detail),
            code="not_found" if exc.status_code == 404 else None,
            headers=getattr(exc, "headers", None),
        )

    def refusal(exc: RequestError):
        return error(exc.status, exc.message, kind=exc.kind, param=exc.param, code=exc.code, headers=exc.headers)

    @app.exception_handler(RequestError)
    async def refused(request: Request, exc: RequestError):
        return refusal(exc)

    @app.exception_handler(Exception)
    async def server_error(request: Request, exc: Exception):
        return error(500, "internal server error", kind="server_error")

    # ------------------------------------------------------------------ answers

    def usage(choices, state) -> dict:
        """The answer's usage (and the access log's token counts) once every choice has ended: the
        generated tokens whose text is returned (not those cut with a stop string)."""
        prompt_tokens, completion = state["gc_prompt_tokens"], sum(c.completion_tokens() for c in choices)
        state["gc_usage"] = (prompt_tokens, completion)
        return api.usage(prompt_tokens, completion)

    def stream_events(choices, events, state, chunk, last_chunk, usage_chunk=None):
        """Server-sent events: chunk(index, piece, entries) per piece of text, last_chunk(index, reason,
        piece, entries) per ending, then (with stream_options.include_usage) usage_chunk(usage), one
        more chunk with no choices and the usage, as OpenAI sends it, then [DONE]."""

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
                        message = refusal(requests.failure([reason], state, choices)).body.decode()
                        yield f"data: {message}\n\n"  # the status line has gone out: the error goes in the stream
                        break
                    yield f"data: {json.dumps(last_chunk(index, reason, piece, entries))}\n\n"
                    if open_choices == 0:
                        counts = usage(choices, state)
                        if usage_chunk is not None:
                            yield f"data: {json.dumps(usage_chunk(counts))}\n\n"
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

    card = model_card(generator, model_name, requests.context)
    names = (model_name, *aliases)

    def check_model(name) -> None:
        """A request for a model this server does not serve is refused, as OpenAI refuses it."""
        if name is not None and name not in names:
            raise RequestError(
                404,
                f"the model {name!r} does not exist; this server serves {model_name!r}",
                param="model",
                code="model_not_found",
            )

    @app.get("/v1/models")
    def models():
        return {"object": "list", "data": [card]}

    @app.get("/v1/models/{name:path}")
    def model(name: str):
        check_model(name)
        return card

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
        check_model(req.model)
        state, choices, events = await requests.admit(
            request, req, req.prompts(), req.max_tokens, req.stop_strings(), req.logprobs, req.echo
        )
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

        def usage_chunk(counts):
            return dict(body(0, "", None, []), choices=[], usage=counts)

        if req.stream:
            return stream_events(
                choices,
                events,
                state,
                lambda i, piece, e: body(i, piece, None, e),
                lambda i, reason, piece, e: body(i, piece, reason, e),
                usage_chunk if req.include_usage() else None,
            )
        texts, reasons, entries = await requests.collect(choices, events, state)
        out = body(0, "", None, [])
        out["choices"] = [body(i, texts[i], reasons[i], entries[i])["choices"][0] for i in range(len(choices))]
        out["usage"] = usage(choices, state)
        return out

    @app.post("/v1/chat/completions")
    async def chat_completions(req: api.ChatRequest, request: Request):
        check_model(req.model)
        top = (req.top_logprobs or 0) if req.logprobs else None
        stops = req.stop_strings() + (api.CHAT_STOP,)
        state, choices, events = await requests.admit(
            request, req, [req.prompt()], req.max_completion_tokens or req.max_tokens, stops, top, False
        )
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
                (lambda counts: dict(envelope("chat.completion.chunk", []), usage=counts))
                if req.include_usage()
                else None,
            )
        texts, reasons, entries = await requests.collect(choices, events, state)
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
        out["usage"] = usage(choices, state)
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
    if access_log and not log.handlers:
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False
    sock = sock or bind(host, port)
    app = create_app(generator, model_name, **app_options)
    run_uvicorn(app, host, port, sock)  # with the connection limits (http_front.LIMITS)
