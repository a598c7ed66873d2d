"""The OpenAI API of `gradcraft serve` filled out: n, logprobs, echo, chat, usage, 429, timeouts, API keys."""

import json
import math
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

from gradcraft.inference.openai_api import chat_prompt
from test_server import _free_port, _wait_healthy, is_openai_error, start_in_process


def _generator(trained_run, seq_len=None, dim=32, n_layers=1):
    from gradcraft.inference.text import TextGenerator, load_model, paths_from_model_dir
    from gradcraft.models import ModelConfig, Transformer
    from gradcraft.tokenizer import Tokenizer

    vocab, config, weights = paths_from_model_dir(str(trained_run / "run"))
    tokenizer = Tokenizer.load(vocab)
    if seq_len is None:
        return TextGenerator(load_model(config, weights)[0], tokenizer)
    model = Transformer(
        ModelConfig(vocab_size=tokenizer.vocab_size, seq_len=seq_len, dim=dim, n_layers=n_layers, n_heads=2)
    )

    class WithoutEndOfText(TextGenerator):  # random weights would end at <|endoftext|> now and then
        def stop_ids(self):
            return ()

    return WithoutEndOfText(model, tokenizer)


@pytest.fixture(scope="module")
def api(trained_run):
    url, app, stop = start_in_process(_generator(trained_run), slots=4)
    yield url
    stop()


@pytest.fixture(scope="module")
def long_context(trained_run):
    return _generator(trained_run, seq_len=4096)


@pytest.fixture(scope="module")
def chat_api(long_context):
    """A context long enough for chat prompts (the trained run's is 24 tokens)."""
    url, app, stop = start_in_process(long_context, slots=4)
    yield url
    stop()


def call(url, path, payload=None, headers=None, method=None):
    data = None if payload is None else json.dumps(payload).encode()
    req = urllib.request.Request(
        url + path, data=data, method=method, headers=dict({"Content-Type": "application/json"}, **(headers or {}))
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read().decode(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), dict(e.headers)


def complete(url, **payload):
    status, text, _ = call(url, "/v1/completions", payload)
    assert status == 200, text
    return json.loads(text)


def events(text):
    lines = [line[6:] for line in text.splitlines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(line) for line in lines[:-1]]


def test_n_choices_and_prompt_lists_equal_single_requests_with_seed_plus_i(api):
    many = complete(api, prompt=["def ", "x = "], n=3, max_tokens=6, temperature=1.0, seed=7)
    assert [c["index"] for c in many["choices"]] == list(range(6))
    for p, prompt in enumerate(["def ", "x = "]):
        for i in range(3):
            alone = complete(api, prompt=prompt, max_tokens=6, temperature=1.0, seed=7 + i)
            assert many["choices"][3 * p + i]["text"] == alone["choices"][0]["text"]
    alone_usage = [complete(api, prompt=p, max_tokens=6, temperature=1.0, seed=7)["usage"] for p in ("def ", "x = ")]
    assert many["usage"]["prompt_tokens"] == sum(u["prompt_tokens"] for u in alone_usage)


def test_streamed_usage_equals_the_plain_answers_for_several_choices(api):
    payload = dict(prompt="def ", n=2, max_tokens=8, temperature=0.9, seed=3)
    plain = complete(api, **payload)
    status, text, _ = call(api, "/v1/completions", dict(payload, stream=True))
    assert status == 200 and all("usage" not in c for c in events(text))  # none unless asked, as OpenAI
    status, text, _ = call(api, "/v1/completions", dict(payload, stream=True, stream_options={"include_usage": True}))
    chunks = events(text)
    assert status == 200 and chunks[-1]["choices"] == [] and all("usage" not in c for c in chunks[:-1])
    assert chunks[-1]["usage"] == plain["usage"]
    chunks = chunks[:-1]
    for i in range(2):
        streamed = "".join(c["choices"][0]["text"] for c in chunks if c["choices"][0]["index"] == i)
        assert streamed == plain["choices"][i]["text"]
    assert {c["choices"][0]["finish_reason"] for c in chunks if c["choices"][0]["finish_reason"]} <= {"stop", "length"}


def test_logprobs_and_echo(api):
    answer = complete(api, prompt="def ", max_tokens=5, temperature=0, logprobs=3)
    choice, usage = answer["choices"][0], answer["usage"]
    lp = choice["logprobs"]
    assert len(lp["tokens"]) == usage["completion_tokens"] == len(lp["token_logprobs"]) == len(lp["top_logprobs"])
    assert "".join(lp["tokens"]) == choice["text"]
    for chosen, top in zip(lp["token_logprobs"], lp["top_logprobs"]):
        assert len(top) == 3 and chosen <= 0 and math.isclose(chosen, max(top.values()), abs_tol=1e-6)  # greedy
    assert np.all(np.diff(lp["text_offset"]) >= 0)
    echoed = complete(api, prompt="def ", max_tokens=5, temperature=0, logprobs=1, echo=True)["choices"][0]
    assert echoed["text"] == "def " + choice["text"]
    prompt_tokens = usage["prompt_tokens"]
    assert echoed["logprobs"]["token_logprobs"][0] is None
    assert echoed["logprobs"]["token_logprobs"][prompt_tokens:] == pytest.approx(lp["token_logprobs"], abs=1e-6)
    assert "".join(echoed["logprobs"]["tokens"]) == echoed["text"]
    assert complete(api, prompt="def ", max_tokens=3, echo=True, stream=False)["choices"][0]["text"].startswith("def ")


def test_chat_completions_use_the_default_template(chat_api):
    api = chat_api
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "def"}]
    payload = {
        "messages": messages,
        "max_tokens": 6,
        "temperature": 0.8,
        "seed": 2,
        "logprobs": True,
        "top_logprobs": 2,
    }
    status, text, _ = call(api, "/v1/chat/completions", payload)
    assert status == 200, text
    answer = json.loads(text)
    assert answer["object"] == "chat.completion" and answer["choices"][0]["message"]["role"] == "assistant"
    prompt = chat_prompt([("system", "be brief"), ("user", "def")])
    assert prompt == "System: be brief\nUser: def\nAssistant:"
    same = complete(api, prompt=prompt, max_tokens=6, temperature=0.8, seed=2, stop="\nUser:")
    assert answer["choices"][0]["message"]["content"] == same["choices"][0]["text"]
    assert answer["usage"] == same["usage"]
    assert len(answer["choices"][0]["logprobs"]["content"]) == answer["usage"]["completion_tokens"]
    status, text, _ = call(
        api, "/v1/chat/completions", dict(payload, stream=True, stream_options={"include_usage": True})
    )
    chunks = events(text)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert (
        "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[:-1])
        == answer["choices"][0]["message"]["content"]
    )
    assert chunks[-1]["usage"] == answer["usage"] and chunks[-1]["choices"] == []
    for bad in (
        {"messages": []},
        {"messages": [{"role": "robot", "content": "x"}]},
        {"messages": "hi"},
        {"messages": [{"role": "user"}]},
    ):
        status, text, _ = call(api, "/v1/chat/completions", bad)
        assert status == 400 and is_openai_error(text)


def test_errors_of_every_status_have_the_openai_shape(api):
    assert call(api, "/v1/nope", {})[0] == 404 and is_openai_error(call(api, "/v1/nope", {})[1])
    status, text, _ = call(api, "/v1/completions", method="GET")
    assert status == 405 and is_openai_error(text)
    for bad in (
        {"prompt": "a", "n": 0},
        {"prompt": "a", "n": 99},
        {"prompt": "a", "logprobs": 6},
        {"prompt": [], "max_tokens": 2},
        {"prompt": ["a", 1]},
        {"prompt": "a", "echo": "yes"},
    ):
        status, text, _ = call(api, "/v1/completions", bad)
        assert status == 400 and is_openai_error(text), (bad, text)


def test_a_full_queue_answers_429_and_a_slow_request_503(long_context, trained_run):
    # The queue: one slot and room for one to wait. A model big enough that its 4000 tokens take seconds,
    # so that the second request is still waiting when the third comes, on a loaded machine too.
    slow = _generator(trained_run, seq_len=4096, dim=256, n_layers=4)
    url, app, stop = start_in_process(slow, slots=1, max_queue=1, request_timeout=120.0)
    try:
        host, port = url.rsplit("/", 1)[-1].split(":")
        long = json.dumps({"prompt": "def ", "max_tokens": 4000, "temperature": 1.0, "stream": True}).encode()
        holders = []
        for _ in range(2):  # one takes the slot, one waits
            s = socket.create_connection((host, int(port)), timeout=10)
            s.sendall(
                b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(long), long)
            )
            holders.append(s)
        deadline = time.monotonic() + 30
        settled = {"waiting": 1, "running": 1, "slots": 1}
        while app.scheduler.load() != settled and time.monotonic() < deadline:
            time.sleep(0.01)
        assert app.scheduler.load() == settled
        status, text, headers = call(url, "/v1/completions", {"prompt": "def ", "max_tokens": 2})
        assert status == 429 and is_openai_error(text) and json.loads(text)["error"]["code"] == "queue_full"
        assert {k.lower(): v for k, v in headers.items()}.get("retry-after") == "1"
        for s in holders:
            s.close()
    finally:
        stop()
    # The timeout: a request that cannot finish within it gets a 503, and the server serves on.
    url, app, stop = start_in_process(long_context, slots=1, max_queue=1, request_timeout=1.0)
    try:
        status, text, _ = call(url, "/v1/completions", {"prompt": "def ", "max_tokens": 4000, "temperature": 1.0})
        assert status == 503 and json.loads(text)["error"]["code"] == "timeout", text
        assert complete(url, prompt="def ", max_tokens=2)["usage"]["completion_tokens"] <= 2
    finally:
        stop()


def test_an_api_key_guards_the_v1_paths(trained_run):
    url, _, stop = start_in_process(_generator(trained_run), api_key="sekrit")
    try:
        payload = {"prompt": "def ", "max_tokens": 2}
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "sekrit"}):
            status, text, got = call(url, "/v1/completions", payload, headers)
            assert status == 401 and json.loads(text)["error"]["code"] == "invalid_api_key"
            assert {k.lower(): v for k, v in got.items()}.get("www-authenticate") == "Bearer"
        assert call(url, "/v1/models", headers={"Authorization": "Bearer wrong"})[0] == 401
        assert call(url, "/v1/completions", payload, {"Authorization": "Bearer sekrit"})[0] == 200
        assert call(url, "/health")[0] == 200  # open: a load balancer's probe has no key
    finally:
        stop()


def test_the_openai_client_talks_to_the_server(chat_api):
    api = chat_api
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=api + "/v1", api_key="unused", max_retries=0)
    answer = client.completions.create(model="test", prompt="def ", max_tokens=5, temperature=0.7, seed=4, n=2)
    assert len(answer.choices) == 2 and answer.usage.completion_tokens > 0
    stream = client.completions.create(model="test", prompt="def ", max_tokens=5, temperature=0.7, seed=4, stream=True)
    pieces = [(c.choices[0].index, c.choices[0].text) for c in stream if c.choices]
    assert "".join(t for i, t in pieces if i == 0) == answer.choices[0].text
    chat = client.chat.completions.create(
        model="test", messages=[{"role": "user", "content": "hi"}], max_tokens=4, seed=4
    )
    assert chat.choices[0].message.role == "assistant" and chat.usage.completion_tokens >= 0
    chunks = list(
        client.chat.completions.create(
            model="test", messages=[{"role": "user", "content": "hi"}], max_tokens=4, seed=4, stream=True
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == chat.choices[0].message.content


def test_serve_warns_when_bound_beyond_this_machine_and_refuses_bad_limits(trained_run, tmp_path, capsys):
    from cli_helpers import run_cli

    model = ["--model_dir", str(trained_run / "run")]
    for flags in (
        ["--max_batch", "0"],
        ["--max_queue", "-1"],
        ["--request_timeout", "0"],
        ["--api_key", " "],
        ["--prefill_chunk", "0"],
    ):
        # (run_cli: argparse's exits too, and no access-log line of the module's in-process server)
        status, _, err = run_cli(["serve", *model, *flags], capsys)
        assert status == 2
        assert err.startswith("error: ") and err.count("\n") == 1, (flags, err)
    port = _free_port()
    err = tmp_path / "stderr.txt"
    with open(err, "w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gradcraft.cli.main", "serve", *model, "--host", "0.0.0.0", "--port", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        _wait_healthy(f"http://127.0.0.1:{port}")
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    warning = err.read_text().splitlines()[0]
    assert warning.startswith("warning: --host 0.0.0.0") and "--api_key" in warning
