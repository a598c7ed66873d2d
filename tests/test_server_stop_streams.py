"""The server's streams cut at stop strings of every length that arrive split across tokens.

A sampled answer (a fixed seed) without stops gives the text; stop strings of 1 to 6 characters are taken from
places inside it (so they occur, and most span two or three tokens of this byte-level vocabulary).
With each stop, the streamed pieces joined, the plain answer, and the text before the stop's first
occurrence must be the same, and the finish reason "stop". TextStream itself is checked at every byte
cut in tests/test_special_tokens_and_streams.py; this checks the server's use of it.
"""

import pytest

from test_server import start_in_process
from test_server_api import _generator, call, complete, events


@pytest.fixture(scope="module")
def api(trained_run):
    url, app, stop = start_in_process(_generator(trained_run), slots=2)
    yield url
    stop()


def test_streamed_text_stops_before_a_split_stop_string(api):
    full = complete(api, prompt="def ", max_tokens=16, temperature=1.0, seed=11)["choices"][0]["text"]
    assert len(full) >= 12, full
    stops = []
    for length in range(1, 7):
        start = (3 * length) % max(len(full) - length, 1)
        stop = full[start : start + length]
        if stop.strip() and stop not in stops:
            stops.append(stop)
    assert len(stops) >= 4, (full, stops)
    for stop in stops:
        want = full[: full.find(stop)]
        payload = dict(prompt="def ", max_tokens=16, temperature=1.0, seed=11, stop=stop)
        plain = complete(api, **payload)["choices"][0]
        assert plain["text"] == want and plain["finish_reason"] == "stop", (stop, plain)
        status, text, _ = call(api, "/v1/completions", dict(payload, stream=True))
        assert status == 200, text
        chunks = events(text)
        streamed = "".join(c["choices"][0]["text"] for c in chunks if c.get("choices"))
        assert streamed == want, (stop, streamed, want)
        assert [c["choices"][0]["finish_reason"] for c in chunks if c.get("choices")][-1] == "stop"
