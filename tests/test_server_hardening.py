"""`gradcraft serve` against hostile clients: silent sockets, a head or a body that
stalls, more connections than the cap, a forged access-log line, a request no queue can hold,
shutdown with requests in flight, and size flags beyond the machine's memory. One real server (a
process of its own) with tight limits, so each case takes about a second."""

import json
import signal
import socket
import time

import pytest

from cli_helpers import run_cli
from test_server import _serve, post

LIMITS = ["--header_timeout", "1", "--idle_timeout", "1", "--body_timeout", "1", "--max_connections", "30"]
LIMITS += ["--max_batch", "2", "--max_queue", "2"]


@pytest.fixture(scope="module")
def hardened(trained_run, tmp_path_factory):
    log = tmp_path_factory.mktemp("hardened") / "serve.log"
    proc, url = _serve(trained_run, *LIMITS, log_path=log)
    yield proc, url, log
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=30)


def _connect(url) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=5)


def _closed_by_server(sock, within: float) -> bool:
    """Whether the server closes the connection within `within` seconds (reads return nothing)."""
    sock.settimeout(within)
    try:
        while True:
            data = sock.recv(4096)
            if not data:
                return True
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def _health(url, timeout=3.0) -> int:
    sock = _connect(url)
    sock.settimeout(timeout)
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    head = sock.recv(4096)
    sock.close()
    return int(head.split()[1])


def test_a_head_that_never_completes_is_closed(hardened):
    _, url, _ = hardened
    sock = _connect(url)
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
    t0 = time.time()
    assert _closed_by_server(sock, 5), "a partial head was kept open"
    assert time.time() - t0 < 3
    silent = _connect(url)  # nothing at all
    assert _closed_by_server(silent, 5)


def test_a_stalled_body_gets_a_408(hardened):
    _, url, _ = hardened
    sock = _connect(url)
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n")
    sock.sendall(b'Content-Length: 100\r\n\r\n{"prompt": ')
    sock.settimeout(5)
    t0 = time.time()
    answer = sock.recv(4096)
    assert answer.startswith(b"HTTP/1.1 408"), answer
    assert time.time() - t0 < 3
    sock.close()


def test_many_silent_sockets_cannot_exhaust_the_server(hardened):
    """More silent connections than the cap: the ones over it get a 503 at once, the others are
    closed by the head timeout, and /health answers again within seconds."""
    _, url, _ = hardened
    sockets = [_connect(url) for _ in range(45)]
    try:
        refused = 0
        for sock in sockets[-10:]:
            sock.settimeout(2)
            data = sock.recv(4096)
            refused += data.startswith(b"HTTP/1.1 503") and b"too_many_connections" in data
        assert refused == 10
        deadline = time.time() + 6
        while _health(url) != 200:
            assert time.time() < deadline, "/health never answered 200 again"
            time.sleep(0.2)
        assert all(_closed_by_server(sock, 3) for sock in sockets[:30])
    finally:
        for sock in sockets:
            sock.close()


def test_access_log_fields_are_escaped(hardened):
    _, url, log = hardened
    sock = _connect(url)
    forged = b"/x%0D%0A2026-01-01%2000:00:00,000%20127.0.0.1%20GET%20/admin%20200%200.001s"
    sock.sendall(b"GET " + forged + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert sock.recv(4096).startswith(b"HTTP/1.1 404")
    sock.close()
    time.sleep(0.3)
    lines = log.read_text().splitlines()
    assert not any(line.startswith("2026-01-01") for line in lines), lines
    assert any("/x\\r\\n2026-01-01" in line for line in lines), lines


def test_a_request_larger_than_the_queue_gets_a_400_not_a_429(hardened):
    _, url, _ = hardened
    status, text = post(url, {"prompt": ["a", "b", "c"], "n": 2, "max_tokens": 1})
    assert status == 400, text
    error = json.loads(text)["error"]
    assert error["code"] == "request_too_large" and "at most 4" in error["message"]
    assert post(url, {"prompt": "def ", "max_tokens": 1})[0] == 200


@pytest.mark.parametrize(
    "flags,words",
    [
        (["--max_batch", "1000000000"], ["--max_batch 1000000000", "at most"]),
        (["--max_queue", "1000000000"], ["--max_queue"]),
        (["--max_body_bytes", "10000000000"], ["--max_body_bytes"]),
    ],
)
def test_size_flags_beyond_memory_are_refused_up_front(trained_run, flags, words, capsys, monkeypatch):
    from gradcraft.training import resources

    monkeypatch.setattr(resources, "available_memory_bytes", lambda device: 16 << 30)  # a 16 GiB machine

    def never(args):
        raise AssertionError("the model was loaded: the flags were not refused up front")

    monkeypatch.setattr("gradcraft.cli.serve.load", never)
    status, out, err = run_cli(["serve", "--model_dir", trained_run / "run", "--port", "1", *flags], capsys)
    assert status == 2 and err.count("\n") == 1 and err.startswith("error: "), err
    assert "serving" not in out
    for word in words:
        assert word in err


def test_a_request_cancelled_by_the_shutdown_gets_a_503_not_a_traceback():
    """What uvicorn does to a request still running when the grace period ends: it cancels its
    task. The front answers 503 (when nothing was sent yet), cancels the request's sequences and
    ends normally."""
    import asyncio

    from gradcraft.inference.http_front import _Front

    sent, events = [], {}

    async def app(scope, receive, send):  # a generation that outlives the grace period
        await asyncio.sleep(60)

    bodies = [{"type": "http.request", "body": b"{}", "more_body": False}]

    async def receive():  # the body, then nothing (the client stays)
        if bodies:
            return bodies.pop()
        await asyncio.sleep(3600)

    async def send(message):
        sent.append(message)

    async def scenario():
        scope = {"type": "http", "method": "POST", "path": "/v1/completions", "headers": []}
        task = asyncio.ensure_future(_Front(app, 1000)(scope, receive, send))
        await asyncio.sleep(0.05)
        task.cancel()
        await task  # ends normally
        events["cancel"] = scope["state"]["gc_cancel"].is_set()

    asyncio.run(scenario())
    assert sent[0]["status"] == 503 and b"shutting_down" in sent[1]["body"]
    assert events["cancel"]


def test_sigterm_shuts_down_within_seconds_whatever_clients_hold(hardened):
    """Last (it stops the module's server): a partial body and an idle connection do not hold
    SIGTERM's shutdown; exit 143, no traceback."""
    proc, url, log = hardened
    partial = _connect(url)
    partial.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n{")
    idle = _connect(url)
    idle.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    time.sleep(0.2)
    t0 = time.time()
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=15)
    assert time.time() - t0 < 5, time.time() - t0
    assert proc.returncode == 143
    assert "Traceback" not in log.read_text(), log.read_text()


def test_serve_help_lists_the_limits(capsys):
    status, out, _ = run_cli(["serve", "--help"], capsys)
    for flag in ("--max_connections", "--header_timeout", "--idle_timeout", "--body_timeout"):
        assert flag in out
