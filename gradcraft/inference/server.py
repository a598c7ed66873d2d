"""An OpenAI-compatible completions server (FastAPI + uvicorn).

    POST /v1/completions   {"prompt": "...", "max_tokens": 64, "temperature": 0.8, "top_k": 40, "top_p": 0.95,
                            "stop": ["\\n\\n"], "seed": 1, "stream": false}
    GET  /v1/models
    GET  /health

The model is loaded once. Requests are served one at a time, in arrival order,
by a single generation worker (a lock around the engine), so concurrent
requests can never share or corrupt a KV cache; each request has its own
caches and its own random generator, so its answer does not depend on what
else is running. Streaming responses are server-sent events.
"""

import json
import queue
import threading
import time
import uuid

from gradcraft.errors import UserError
from gradcraft.inference.generate import SamplingParams

MAX_PROMPT_CHARS = 1_000_000


def create_app(generator, model_name: str):
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, StreamingResponse
    from pydantic import BaseModel, Field

    context = generator.model.config.seq_len
    engine_lock = threading.Lock()

    class CompletionRequest(BaseModel):
        model: str | None = None
        prompt: str = Field(..., max_length=MAX_PROMPT_CHARS)
        max_tokens: int = 16
        temperature: float | None = 1.0
        top_k: int | None = None
        top_p: float | None = None
        stop: str | list[str] | None = None
        seed: int | None = None
        stream: bool = False
        model_config = {"extra": "ignore", "strict": True}

    app = FastAPI(title="gradcraft", version="0.1.0")

    def error(status: int, message: str, kind: str = "invalid_request_error"):
        return JSONResponse(status_code=status, content={"error": {"message": message, "type": kind}})

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError):
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        return error(400, f"{where or 'body'}: {first.get('msg', 'invalid request')}")

    def prepare(req: CompletionRequest):
        if not req.prompt:
            raise UserError("prompt must not be empty")
        if req.max_tokens < 1 or req.max_tokens > context:
            raise UserError(f"max_tokens must be between 1 and the context length {context}, got {req.max_tokens}")
        stops = (req.stop,) if isinstance(req.stop, str) else tuple(req.stop or ())
        params = SamplingParams(max_tokens=req.max_tokens, temperature=req.temperature, top_k=req.top_k,
                                top_p=req.top_p, seed=req.seed, stop_strings=stops)
        params.validate(context)
        prompt_ids = generator.encode_prompt(req.prompt)
        if len(prompt_ids) >= context:
            raise UserError(f"the prompt is {len(prompt_ids)} tokens; the model's context is {context} tokens")
        return params, len(prompt_ids)

    def body(text: str, reason: str, prompt_tokens: int, completion_tokens: int, rid: str, created: int):
        return {"id": rid, "object": "text_completion", "created": created, "model": model_name,
                "choices": [{"text": text, "index": 0, "logprobs": None, "finish_reason": reason}],
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                          "total_tokens": prompt_tokens + completion_tokens}}

    def finish_reason(reason: str) -> str:
        return "stop" if reason == "stop" else "length"

    @app.get("/health")
    def health():
        return {"status": "ok"}

    @app.get("/v1/models")
    def models():
        return {"object": "list", "data": [{"id": model_name, "object": "model", "owned_by": "gradcraft",
                                            "context_length": context}]}

    @app.post("/v1/completions")
    def completions(req: CompletionRequest):
        try:
            params, prompt_tokens = prepare(req)
        except UserError as e:
            return error(400, str(e))
        rid, created = f"cmpl-{uuid.uuid4().hex[:24]}", int(time.time())
        if not req.stream:
            with engine_lock:
                texts, reasons = generator.complete([req.prompt], params)
                n = generator.last_token_counts[0]
            return body(texts[0], finish_reason(reasons[0]), prompt_tokens, n, rid, created)

        pieces: queue.Queue = queue.Queue()

        def work():
            try:
                with engine_lock:
                    _, reasons = generator.complete([req.prompt], params, lambda _, piece: pieces.put(piece))
                pieces.put(("done", finish_reason(reasons[0])))
            except Exception as e:  # report in the stream: the status line has already gone out
                pieces.put(("error", str(e)))

        threading.Thread(target=work, daemon=True).start()

        def events():
            while True:
                item = pieces.get()
                if isinstance(item, tuple):
                    kind, value = item
                    if kind == "error":
                        yield f"data: {json.dumps({'error': {'message': value, 'type': 'server_error'}})}\n\n"
                    else:
                        yield f"data: {json.dumps(body('', value, prompt_tokens, 0, rid, created))}\n\n"
                    yield "data: [DONE]\n\n"
                    return
                chunk = body(item, None, prompt_tokens, 0, rid, created)
                chunk.pop("usage")
                yield f"data: {json.dumps(chunk)}\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return app


def serve(generator, model_name: str, host: str = "127.0.0.1", port: int = 8000) -> None:
    import uvicorn
    uvicorn.run(create_app(generator, model_name), host=host, port=port, log_level="warning")
