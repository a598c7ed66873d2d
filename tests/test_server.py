"""`gradcraft serve` against a real server on loopback: concurrency, streaming, and 4xx for bad requests."""

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from cli_helpers import run_cli


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(url, check_alive=lambda: None, tries=300, pause=0.1) -> None:
    """Poll url/health until it answers; check_alive() raises when the server died first."""
    for _ in range(tries):
        try:
            urllib.request.urlopen(url + "/health", timeout=1)
            return
        except OSError:
            check_alive()
            time.sleep(pause)
    raise AssertionError(f"{url} never answered /health")


def _serve(trained_run, *flags, log_path=None):
    """`gradcraft serve` of the trained run on a free port, its stderr into log_path (a file, not a
    pipe: a full pipe would block the server's logging): (process, URL), once /health answers."""
    port = _free_port()
    stderr = open(log_path, "w") if log_path else subprocess.DEVNULL
    try:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gradcraft.cli.main",
                "serve",
                "--model_dir",
                str(trained_run / "run"),
                "--port",
                str(port),
                *flags,
            ],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            text=True,
        )
    finally:
        if log_path:
            stderr.close()
    url = f"http://127.0.0.1:{port}"

    def check_alive():
        if proc.poll() is not None:
            raise AssertionError(log_path.read_text() if log_path else f"serve exited with {proc.returncode}")

    _wait_healthy(url, check_alive)
    return proc, url


@pytest.fixture(scope="module")
def served(trained_run, tmp_path_factory):
    """A running `gradcraft serve` (body limit 100 kB); yields its URL and its stderr (the access log) file."""
    log_path = tmp_path_factory.mktemp("serve") / "stderr.txt"
    proc, url = _serve(trained_run, "--max_body_bytes", "100000", log_path=log_path)
    yield url, log_path
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(scope="module")
def server(served):
    return served[0]


def post(url, payload, raw: bytes | None = None):
    data = raw if raw is not None else json.dumps(payload).encode()
    req = urllib.request.Request(url + "/v1/completions", data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_health_and_models(server):
    assert json.loads(urllib.request.urlopen(server + "/health").read()) == {"status": "ok"}
    models = json.loads(urllib.request.urlopen(server + "/v1/models").read())
    assert models["data"][0]["id"] == "run"


def test_200_requests_from_16_clients_each_equal_the_single_answer(server):
    prompts = ["def ", "x = ", "# ü", "return"]
    cases = [(p, seed) for p in prompts for seed in (1, 2, 3)]
    single = {}
    for prompt, seed in cases:
        status, text = post(server, {"prompt": prompt, "max_tokens": 8, "temperature": 1.0, "top_k": 50, "seed": seed})
        assert status == 200
        single[(prompt, seed)] = json.loads(text)["choices"][0]["text"]
    rng = np.random.default_rng(0)
    picks = [cases[i] for i in rng.integers(0, len(cases), size=200)]

    def ask(case):
        prompt, seed = case
        status, text = post(server, {"prompt": prompt, "max_tokens": 8, "temperature": 1.0, "top_k": 50, "seed": seed})
        return case, status, json.loads(text)["choices"][0]["text"]

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(ask, picks))
    assert all(status == 200 and text == single[case] for case, status, text in results)


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def is_openai_error(text: str) -> bool:
    error = json.loads(text)["error"]
    return set(error) == {"message", "type", "param", "code"} and isinstance(error["message"], str)


def raw_request(url, head: bytes, body: bytes = b"") -> tuple[int, str]:
    """Send bytes on a fresh connection; returns the status and the body of the answer."""
    host, port = url.rsplit("/", 1)[-1].split(":")
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(head + body)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head_part, _, rest = data.partition(b"\r\n\r\n")
    return int(head_part.split()[1]), rest.decode()


def test_streaming_equals_non_streaming_and_reports_the_real_token_count(server):
    payload = {"prompt": "def ", "max_tokens": 12, "temperature": 0.9, "seed": 5}
    _, plain = post(server, payload)
    _, streamed = post(server, dict(payload, stream=True, stream_options={"include_usage": True}))
    events = [line[6:] for line in streamed.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    text = "".join(json.loads(e)["choices"][0]["text"] for e in events[:-2])
    assert text == json.loads(plain)["choices"][0]["text"]
    usage = json.loads(events[-2])["usage"]
    assert usage == json.loads(plain)["usage"]
    assert usage["completion_tokens"] > 0


@pytest.mark.parametrize(
    "payload,raw,status",
    [
        (None, b"{not json", 400),
        ({"prompt": 123, "max_tokens": 5}, None, 400),
        ({"prompt": "a", "max_tokens": "many"}, None, 400),
        ({"prompt": "a", "max_tokens": 5.0}, None, 400),
        ({"prompt": "a", "max_tokens": True}, None, 400),
        ({"prompt": "a", "max_tokens": 100000}, None, 400),
        ({"prompt": "", "max_tokens": 5}, None, 400),
        ({"prompt": "word " * 500, "max_tokens": 5}, None, 400),
        ({"max_tokens": 5}, None, 400),
        ([1, 2], None, 400),
        ({"prompt": "a", "temperature": -1}, None, 400),
        (None, b'{"prompt": "a", "temperature": NaN}', 400),
        (None, b'{"prompt": "a", "temperature": Infinity}', 400),
        (None, b'{"prompt": "a", "top_p": NaN}', 400),
        ({"prompt": "a", "temperature": 1e-310}, None, 400),
        ({"prompt": "a", "temperature": 1e9}, None, 400),
        ({"prompt": "a", "top_p": 0}, None, 400),
        ({"prompt": "a", "top_p": 1.5}, None, 400),
        ({"prompt": "a", "top_p": -0.1}, None, 400),
        ({"prompt": "a", "top_k": 0}, None, 400),
        ({"prompt": "a", "seed": -1}, None, 400),
        ({"prompt": "a", "seed": 2**70}, None, 400),
        ({"prompt": "a", "seed": 1.5}, None, 400),
        ({"prompt": "a", "stop": ["a", "b", "c", "d", "e"]}, None, 400),
        ({"prompt": "a", "stop": "x" * 1000}, None, 400),
        ({"prompt": "a", "stop": [1]}, None, 400),
        ({"prompt": "a", "stream": "yes"}, None, 400),
        (None, b'{"prompt": "\\ud800"}', 400),
    ],
)
def test_bad_requests_get_an_openai_error_and_the_server_keeps_serving(server, payload, raw, status):
    got, text = post(server, payload, raw)
    assert got == status, text
    assert is_openai_error(text)
    assert post(server, {"prompt": "def ", "max_tokens": 2})[0] == 200


def test_edge_values_that_are_valid_are_served(server):
    for extra in (
        {"temperature": 0},
        {"temperature": 1e-6},
        {"top_p": 1},
        {"top_p": 1e-300},
        {"seed": 2**63 - 1},
        {"seed": 0},
        {"top_k": 10**6},
        {"stop": ["a", "b", "c", "d"]},
        {"temperature": None},
    ):
        status, text = post(server, dict({"prompt": "def ", "max_tokens": 3, "temperature": 1.0}, **extra))
        assert status == 200, (extra, text)


def test_unknown_paths_and_methods_and_docs_answer_in_openai_error_shape(server):
    for path in ("/nope", "/docs", "/openapi.json", "/redoc"):  # the docs are off unless --docs
        status, text = get(server + path)
        assert status == 404 and is_openai_error(text)
    req = urllib.request.Request(server + "/health", method="DELETE")
    try:
        urllib.request.urlopen(req, timeout=10)
        raise AssertionError("DELETE /health should be refused")
    except urllib.error.HTTPError as e:
        assert e.code == 405 and is_openai_error(e.read().decode())


def test_bodies_over_the_limit_get_a_413(server):
    head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    status, text = raw_request(server, head + b"Content-Length: 2000000\r\nConnection: close\r\n\r\n")
    assert status == 413 and is_openai_error(text)
    chunk = b"x" * 10000  # a chunked body declares no length: counted as it arrives
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(11))
    status, text = raw_request(server, head + b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n", chunks)
    assert status == 413 and is_openai_error(text)
    assert post(server, {"prompt": "def ", "max_tokens": 2})[0] == 200


def test_a_prompt_too_long_by_its_bytes_alone_is_refused(server):
    status, text = post(server, {"prompt": "x" * 90000, "max_tokens": 2})
    assert status == 400 and json.loads(text)["error"]["code"] == "context_length_exceeded"
    assert "bytes" in json.loads(text)["error"]["message"]  # refused by its length, before encoding


def test_the_access_log_has_one_line_per_request(served):
    url, log_path = served
    post(url, {"prompt": "def ", "max_tokens": 3, "seed": 123456})
    get(url + "/nope-for-the-log")
    _wait_until(lambda: "GET /nope-for-the-log 404" in log_path.read_text())  # the event, not a guessed delay
    lines = log_path.read_text().splitlines()
    assert any("GET /nope-for-the-log 404" in line for line in lines)
    completions = [line for line in lines if "POST /v1/completions 200" in line]
    assert completions and "prompt_tokens=" in completions[-1] and "completion_tokens=3" in completions[-1]
    assert all("Traceback" not in line for line in lines)


@pytest.mark.parametrize("stream", [True, False])
def test_abandoned_requests_free_the_engine_within_a_second(served, stream):
    url, log_path = served
    host, port = url.rsplit("/", 1)[-1].split(":")
    payload = json.dumps({"prompt": "def ", "max_tokens": 23, "temperature": 1.0, "stream": stream}).encode()
    request = (
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(payload), payload)
    )
    before = log_path.read_text().count("cancelled (client disconnected)")
    start = time.perf_counter()
    assert post(url, {"prompt": "def ", "max_tokens": 5})[0] == 200
    alone = time.perf_counter() - start  # the same request on an idle engine, under this machine's load now
    sockets = []
    for _ in range(200):  # without cancelling, these 200 generations would run to the end (seconds)
        s = socket.create_connection((host, int(port)), timeout=10)
        s.sendall(request)
        sockets.append(s)
    for s in sockets:
        s.close()
    start = time.perf_counter()
    assert post(url, {"prompt": "def ", "max_tokens": 5})[0] == 200
    assert time.perf_counter() - start < max(1.0, 10 * alone)  # (a loaded machine slows both alike)
    _wait_until(lambda: log_path.read_text().count("cancelled (client disconnected)") - before >= 150)


def _wait_until(condition, timeout=60.0):
    """Poll until condition() holds (an event in a log file); fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the event never came"
        time.sleep(0.02)


def test_serve_refuses_a_bad_device_or_port_with_one_error_line(trained_run, capsys):
    """In process (main(), as the `gradcraft` command calls it): five refusals, one interpreter."""
    model = ["--model_dir", str(trained_run / "run")]
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        in_use = str(taken.getsockname()[1])
        for flags in (
            ["--device", "gpu"],
            ["--port", "99999"],
            ["--port", "0"],
            ["--port", in_use],
            ["--max_body_bytes", "0"],
        ):
            status, out, err = run_cli(["serve", *model, *flags], capsys)
            assert status == 2, (flags, err)
            assert err.startswith("error: ") and err.count("\n") == 1, (flags, err)
            assert "serving" not in out


def test_serve_help_describes_the_command(capsys):
    status, out, _ = run_cli(["serve", "--help"], capsys)  # in process: argparse prints, then exits 0
    assert status == 0 and "OpenAI-compatible" in out and "--max_body_bytes" in out and "--docs" in out
    status, listing, _ = run_cli(["--help"], capsys)
    assert status == 0 and "serve" in listing


def test_docs_are_served_with_the_docs_flag(trained_run):
    proc, url = _serve(trained_run, "--docs")
    try:
        assert get(url + "/docs")[0] == 200
        assert "/v1/completions" in json.loads(get(url + "/openapi.json")[1])["paths"]
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def start_in_process(generator, name="test", **options):
    """create_app(generator) served by uvicorn on a thread: (URL, app, stop function)."""
    import threading

    import uvicorn

    from gradcraft.inference.server import bind, create_app

    app = create_app(generator, name, **options)
    sock = bind("127.0.0.1", _free_port())
    server = uvicorn.Server(uvicorn.Config(app, log_level="error"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    _wait_healthy(url, tries=100, pause=0.05)

    def stop():
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
        app.scheduler.close()

    return url, app, stop


@pytest.fixture()
def long_server(trained_run):
    """A model with a context of 4096 tokens (random weights, the trained run's tokenizer): a request
    for 4000 tokens runs for seconds."""
    from gradcraft.inference.text import TextGenerator, paths_from_model_dir
    from gradcraft.models import ModelConfig, Transformer
    from gradcraft.tokenizer import Tokenizer

    tokenizer = Tokenizer.load(paths_from_model_dir(str(trained_run / "run"))[0])
    model = Transformer(ModelConfig(vocab_size=tokenizer.vocab_size, seq_len=4096, dim=32, n_layers=1, n_heads=2))

    class WithoutEndOfText(TextGenerator):  # random weights would end at <|endoftext|> now and then
        def stop_ids(self):
            return ()

    url, app, stop = start_in_process(WithoutEndOfText(model, tokenizer), slots=2)
    yield url, app.scheduler
    stop()


@pytest.mark.parametrize("stream", [True, False])
def test_a_running_generation_stops_when_its_client_disconnects(long_server, stream):
    url, scheduler = long_server
    host, port = url.rsplit("/", 1)[-1].split(":")
    payload = json.dumps(
        {"prompt": "def ", "max_tokens": 4000, "temperature": 1.0, "seed": 1, "stream": stream}
    ).encode()
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(payload), payload)
        )
        deadline = time.monotonic() + 10
        while scheduler.steps < 20 and time.monotonic() < deadline:  # the generation is under way
            time.sleep(0.01)
        assert scheduler.load()["running"] == 1
    start = time.perf_counter()
    while scheduler.load()["running"] and time.perf_counter() - start < 10:
        time.sleep(0.01)
    # Its slot is free, long before the 4000 tokens (a bound on steps, not on time: CI machines are slow).
    assert scheduler.load()["running"] == 0 and scheduler.steps < 1000
    status, text = post(url, {"prompt": "def ", "max_tokens": 3, "temperature": 0})
    assert status == 200 and json.loads(text)["usage"]["completion_tokens"] <= 3
