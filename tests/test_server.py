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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(trained_run):
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "gradcraft.cli.main", "serve", "--model_dir",
                             str(trained_run / "run"), "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            urllib.request.urlopen(url + "/health", timeout=1)
            break
        except OSError:
            if proc.poll() is not None:
                raise AssertionError(proc.stderr.read())
            time.sleep(0.1)
    yield url
    proc.terminate()
    proc.wait(timeout=10)


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
        status, text = post(server, {"prompt": prompt, "max_tokens": 8, "temperature": 1.0, "top_k": 50,
                                     "seed": seed})
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


def test_streaming_equals_non_streaming(server):
    payload = {"prompt": "def ", "max_tokens": 12, "temperature": 0.9, "seed": 5}
    _, plain = post(server, payload)
    _, streamed = post(server, dict(payload, stream=True))
    events = [line[6:] for line in streamed.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    text = "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1])
    assert text == json.loads(plain)["choices"][0]["text"]


@pytest.mark.parametrize("payload,raw", [
    (None, b"{not json"),
    ({"prompt": 123, "max_tokens": 5}, None),
    ({"prompt": "a", "max_tokens": "many"}, None),
    ({"prompt": "a", "max_tokens": 0}, None),
    ({"prompt": "a", "max_tokens": 100000}, None),
    ({"prompt": "", "max_tokens": 5}, None),
    ({"prompt": "word " * 500, "max_tokens": 5}, None),
    ({"max_tokens": 5}, None),
    ({"prompt": "a", "temperature": -1}, None),
])
def test_bad_requests_get_a_4xx_with_a_json_error_and_the_server_keeps_serving(server, payload, raw):
    status, text = post(server, payload, raw)
    assert 400 <= status < 500
    assert "message" in json.loads(text)["error"]
    assert post(server, {"prompt": "def ", "max_tokens": 2})[0] == 200
