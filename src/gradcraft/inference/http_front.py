"""The HTTP front of the completions server (inference/server.py): a plain ASGI layer and the socket.

`_Front` stands before the FastAPI app and sees every request first: it checks the API key (when the
server has one; `Authorization: Bearer <key>` on /v1/ paths), reads the body (refusing one over
`max_body_bytes` with a 413; a POST body is read as JSON whatever its Content-Type),
watches the connection for the client going away (it sets the request's
`gc_cancel` event in the ASGI scope's state, which cancels the request's sequences), and writes one
access-log line (method, path, status, duration, tokens) to the "gradcraft.server" logger.
`bind` makes the listening socket, with a clear error when it cannot.

`run_uvicorn` serves the app with the connection limits of `LIMITS` (`gradcraft serve` sets them from
its flags): a connection that has not sent a whole request head within `header_timeout` seconds, or
sits idle between requests for `idle_timeout`, is closed; a body that stalls for `body_timeout`
seconds gets a 408; beyond `max_connections` open connections a new one is answered 503 and closed
(never an exhausted file-descriptor table); a head over `max_header_bytes` is refused by h11; on
SIGINT/SIGTERM requests still running after `shutdown_timeout` seconds are cancelled.
"""

import asyncio
import dataclasses
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


@dataclasses.dataclass
class Limits:
    """Connection limits of the server (see the module's docstring); seconds and counts."""

    header_timeout: float = 10.0
    idle_timeout: float = 5.0
    body_timeout: float = 30.0
    shutdown_timeout: float = 3.0
    max_connections: int = 1000
    max_header_bytes: int = 16 * 1024


LIMITS = Limits()


def fd_room(reserve: int = 64) -> int:
    """How many connections the process's file-descriptor limit leaves room for (its soft limit
    raised to the hard one first), less `reserve` for the model's files, logs and the listener."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard != resource.RLIM_INFINITY and soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        elif hard == resource.RLIM_INFINITY and soft != hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1 << 16), hard))
            soft = max(soft, 1 << 16)
    except (ImportError, ValueError, OSError):
        return 1 << 16
    return max(1, soft - reserve)


def _clean(text: str, limit: int = 2000) -> str:
    """A field for the access log: control characters (CR, LF, ESC...) and backslashes escaped, so
    that a request cannot forge or garble log lines; at most `limit` characters."""
    out = "".join(c if c.isprintable() and c != "\\" else c.encode("unicode_escape").decode("ascii") for c in text)
    return out if len(out) <= limit else out[:limit] + "..."


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

    def __init__(self, app, max_body_bytes: int, api_key: str | None = None, body_timeout: float | None = None):
        self.app, self.max_body_bytes, self.api_key = app, max_body_bytes, api_key
        self.body_timeout = body_timeout

    def _authorized(self, scope) -> bool:
        """Paths outside /v1/ (/health, the docs) are open; /v1/ needs the key when there is one."""
        if not self.api_key or not scope.get("path", "").startswith("/v1/"):
            return True
        given = _header(scope, b"authorization") or b""
        scheme, _, token = given.decode("latin-1").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), self.api_key.encode())

    async def _read_body(self, scope, receive) -> bytes | None:
        """The whole body, or None when it is over the limit; raises _Cancelled if the client leaves,
        TimeoutError when it sends nothing for the body timeout."""
        declared = _header(scope, b"content-length")
        if declared is not None and (not declared.strip().isdigit() or int(declared) > self.max_body_bytes):
            return None
        chunks, size = [], 0
        timeout = LIMITS.body_timeout if self.body_timeout is None else self.body_timeout
        while True:
            message = await asyncio.wait_for(receive(), timeout)
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
            except TimeoutError:  # a client that stalls mid-body does not hold the request open
                state["gc_outcome"] = "body timeout"
                await _send_json(
                    send_logged,
                    408,
                    error_body("the request body stalled; send it whole without pauses", code="request_timeout"),
                    [(b"connection", b"close")],
                )
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
        except asyncio.CancelledError:
            # the server is shutting down (SIGINT/SIGTERM) and this request outlived its grace period:
            # a 503 when no answer has started, and a normal end for uvicorn (no traceback)
            state["gc_outcome"] = "shutdown"
            cancel.set()  # its sequences leave the batch
            if status[0] is None:
                try:
                    await _send_json(
                        send_logged,
                        503,
                        error_body("the server is shutting down", "server_error", code="shutting_down"),
                        [(b"connection", b"close")],
                    )
                except Exception:  # the connection may be gone already
                    pass
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
        note = {
            "cancelled": " cancelled (client disconnected)",
            "body timeout": " (body timed out)",
            "shutdown": " cancelled (server shutting down)",
        }.get(outcome, "")
        query = scope.get("query_string", b"")
        path = scope.get("path", "") + ("?" + query.decode("latin-1") if query else "")
        log.info(
            "%s %s %s %s %.3fs%s%s",
            _clean(str(client[0])) if client else "-",
            _clean(str(scope.get("method"))),
            _clean(path),
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


_BUSY = json.dumps(
    error_body("the server has too many open connections; retry shortly", "server_error", code="too_many_connections")
).encode()
_BUSY_RESPONSE = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n"
    b"connection: close\r\ncontent-length: " + str(len(_BUSY)).encode() + b"\r\n\r\n" + _BUSY
)


def guarded_protocol(limits: Limits):
    """uvicorn's h11 protocol with a connection cap and a timeout on the request head (uvicorn has
    an idle timeout between requests, `timeout_keep_alive`, but none for a connection that never
    finishes a request head: a thousand silent sockets would hold their file descriptors forever)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class Guarded(H11Protocol):
        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._gc_timer = None
            if len(self.connections) > limits.max_connections:
                transport.write(_BUSY_RESPONSE)
                transport.close()
                return
            self._gc_arm()

        def _gc_arm(self) -> None:
            if self._gc_timer is not None:
                self._gc_timer.cancel()
            self._gc_timer = self.loop.call_later(limits.header_timeout, self._gc_head_timeout)

        def _gc_head_timeout(self) -> None:
            # no request in progress (none began, or the last one is answered): a head that never
            # completed; a request in progress has the body timeout and --request_timeout instead
            if self.cycle is None or self.cycle.response_complete:
                if not self.transport.is_closing():
                    self.transport.close()
            else:
                self._gc_arm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._gc_arm()  # the next request's head gets the same time

        def connection_lost(self, exc) -> None:
            if getattr(self, "_gc_timer", None) is not None:
                self._gc_timer.cancel()
            super().connection_lost(exc)

    return Guarded


def run_uvicorn(app, host: str, port: int, sock, limits: Limits | None = None) -> None:
    """Serve `app` on `sock` with uvicorn, under `limits` (default: LIMITS)."""
    import uvicorn

    limits = limits or LIMITS
    limits.max_connections = min(limits.max_connections, fd_room())
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        http=guarded_protocol(limits),
        timeout_keep_alive=max(1, round(limits.idle_timeout)),
        timeout_graceful_shutdown=max(1, round(limits.shutdown_timeout)),
        h11_max_incomplete_event_size=limits.max_header_bytes,
    )
    uvicorn.Server(config).run(sockets=[sock])
