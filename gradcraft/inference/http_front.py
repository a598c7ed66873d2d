"""The HTTP front of the completions server (inference/server.py): a plain ASGI layer and the socket.

`_Front` stands before the FastAPI app and sees every request first: it checks the API key (when the
server has one; `Authorization: Bearer <key>` on /v1/ paths), reads the body (refusing one over
`max_body_bytes` with a 413; a POST body is read as JSON whatever its Content-Type),
watches the connection for the client going away (it sets the request's
`gc_cancel` event in the ASGI scope's state, which cancels the request's sequences), and writes one
access-log line (method, path, status, duration, tokens) to the "gradcraft.server" logger.
`bind` makes the listening socket, with a clear error when it cannot.
"""

import asyncio
import hmac
import json
import logging
import socket
import threading
import time

from gradcraft.errors import UserError

log = logging.getLogger("gradcraft.server")


def error_body(
    message: str, kind: str = "invalid_request_error", param: str | None = None, code: str | None = None
) -> dict:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


class _Cancelled(Exception):
    """The request's client has gone."""


def _header(scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return value
    return None


async def _send_json(send, status: int, content: dict, headers=()) -> None:
    body = json.dumps(content).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})


class _Front:
    """ASGI layer in front of the app: API key, body limit, disconnect watch, access log."""

    def __init__(self, app, max_body_bytes: int, api_key: str | None = None):
        self.app, self.max_body_bytes, self.api_key = app, max_body_bytes, api_key

    def _authorized(self, scope) -> bool:
        """Paths outside /v1/ (/health, the docs) are open; /v1/ needs the key when there is one."""
        if not self.api_key or not scope.get("path", "").startswith("/v1/"):
            return True
        given = _header(scope, b"authorization") or b""
        scheme, _, token = given.decode("latin-1").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), self.api_key.encode())

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
            if not self._authorized(scope):
                await _send_json(
                    send_logged,
                    401,
                    error_body(
                        "a missing or wrong API key: send the header Authorization: Bearer <key> with the server's "
                        "--api_key",
                        code="invalid_api_key",
                    ),
                    [(b"www-authenticate", b"Bearer")],
                )
                return
            try:
                body = await self._read_body(scope, receive)
            except _Cancelled:
                state["gc_outcome"] = "cancelled"
                return
            if body is None:
                await _send_json(
                    send_logged,
                    413,
                    error_body(
                        f"the request body is over the server's limit of {self.max_body_bytes} bytes",
                        code="request_too_large",
                    ),
                )
                return
            if scope.get("method") == "POST":
                # Every POST route takes JSON: read the body as JSON whatever the client declared (curl -d
                # sends application/x-www-form-urlencoded), as OpenAI's API does.
                headers = [(k, v) for k, v in scope.get("headers", ()) if k.lower() != b"content-type"]
                scope = dict(scope, headers=[*headers, (b"content-type", b"application/json")])
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
        log.info(
            "%s %s %s %s %.3fs%s%s",
            client[0] if client else "-",
            scope.get("method"),
            path,
            status if status is not None else "-",
            seconds,
            tokens,
            note,
        )


def bind(host: str, port: int) -> socket.socket:
    """A socket bound to host:port, or a UserError saying why it cannot be."""
    if not 1 <= port <= 65535:
        raise UserError(f"--port must be between 1 and 65535, got {port}")
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
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
