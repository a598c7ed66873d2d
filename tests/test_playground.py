"""The browser playground at `/` of `gradcraft serve`, driven in a real headless Chromium.

A real `gradcraft serve` of a tiny trained model on 127.0.0.1; the page is typed into and submitted
with the keyboard, and what it shows is compared with the API's own answer to the same request.
Skipped where no Chromium is installed (`scripts/setup_venv.sh test` installs Debian's `chromium`
package where apt-get is available). Screenshots are saved in the test's tmp folder; set
PLAYGROUND_SCREENSHOT_DIR to also write them there (docs/playground.png is one of them).
"""

import json
import os
import re
import shutil
import time
import urllib.request

import pytest
from browser import Browser, find_chromium
from test_server import _serve, get, long_server, post  # noqa: F401 (a fixture)

WIDE, PHONE = (1280, 900), (390, 844)  # a laptop window; an iPhone 12-14 sized one


@pytest.fixture(scope="module")
def served(trained_run):
    proc, url = _serve(trained_run)
    yield url
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    executable = find_chromium()
    if executable is None:
        pytest.skip(
            "no Chromium on PATH: install Debian's `chromium` package (scripts/setup_venv.sh test does "
            "where apt-get is available and it can run as root)"
        )
    folder = tmp_path_factory.mktemp("chromium")
    b = Browser(executable, folder / "profile", folder / "chromium.log")
    yield b
    b.close()


def save_screenshot(page, path, name):
    page.evaluate("document.activeElement && document.activeElement.blur()")  # no focus ring in the picture
    page.screenshot(path / name)
    assert (path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if os.environ.get("PLAYGROUND_SCREENSHOT_DIR"):
        shutil.copy(path / name, os.path.join(os.environ["PLAYGROUND_SCREENSHOT_DIR"], name))


def open_playground(browser, url, size=WIDE, mobile=False):
    page = browser.open(url + "/", *size, mobile=mobile)
    page.wait_for("document.body.dataset.state === 'idle'")
    return page


def fill_request(page, prompt, fields):
    page.fill("#prompt", prompt)  # typed, as keyboard input events
    for name in ("max_tokens", "temperature", "top_k", "top_p", "seed", "stop", *PENALTY_FIELDS):
        page.fill(f"#{name}", fields.get(name, ""))


def submit_and_wait(page, submit=None):
    """Submit (Ctrl+Enter by default) and wait for the page to finish; returns its final state."""
    if submit is None:
        page.press("Enter", "Enter", 13, modifiers=2)  # Ctrl+Enter
    else:
        submit()
    page.wait_for("document.body.dataset.state !== 'idle'", timeout=5)
    return page.wait_for(
        "['done', 'error', 'stopped'].includes(document.body.dataset.state) && document.body.dataset.state", timeout=30
    )


def text(page, selector):
    return page.evaluate(f"document.querySelector({json.dumps(selector)}).textContent")


PENALTY_FIELDS = ("min_p", "repetition_penalty", "frequency_penalty", "presence_penalty", "logit_bias")

CASES = [  # what is typed in the page -> the API request it stands for
    (
        {"max_tokens": "12", "temperature": "0.9", "top_k": "50", "seed": "5"},
        {"max_tokens": 12, "temperature": 0.9, "top_k": 50, "seed": 5},
    ),
    (
        {"max_tokens": "16", "temperature": "1.3", "top_p": "0.9", "seed": "9223372036854775807", "stop": "\\n\nee"},
        {"max_tokens": 16, "temperature": 1.3, "top_p": 0.9, "seed": 2**63 - 1, "stop": ["\n", "ee"]},
    ),
    ({"max_tokens": "10", "temperature": "0"}, {"max_tokens": 10, "temperature": 0}),
    (
        {"max_tokens": "10", "temperature": "0", "repetition_penalty": "1.5", "frequency_penalty": "0.5"},
        {"max_tokens": 10, "temperature": 0, "repetition_penalty": 1.5, "frequency_penalty": 0.5},
    ),
    (
        {"max_tokens": "9", "temperature": "1.1", "seed": "3", "min_p": "0.1", "presence_penalty": "1"},
        {"max_tokens": 9, "temperature": 1.1, "seed": 3, "min_p": 0.1, "presence_penalty": 1},
    ),
    (
        {"max_tokens": "6", "temperature": "0", "logit_bias": '{"40": 5}'},
        {"max_tokens": 6, "temperature": 0, "logit_bias": {"40": 5.0}},
    ),
]


def test_the_page_streams_the_apis_answer_for_the_same_request(served, browser, tmp_path):
    page = open_playground(browser, served)
    for prompt in ("def ", "# ü"):
        for typed, request in CASES:
            fill_request(page, prompt, typed)
            assert submit_and_wait(page) == "done", text(page, "#error")
            status, answer = post(served, dict(request, prompt=prompt))
            assert status == 200
            answer = json.loads(answer)
            assert text(page, "#completion") == answer["choices"][0]["text"], (prompt, typed)
            assert text(page, "#output-prompt") == prompt
            stats = text(page, "#stats")
            assert re.search(r"time to first token \d+ ms", stats), stats
            tokens = answer["usage"]["completion_tokens"]
            assert f"· {tokens} tokens · finish: {answer['choices'][0]['finish_reason']}" in stats, stats
            assert (tokens < 2) or re.search(r"· [\d.]+ tokens/s ·", stats), stats
    save_screenshot(page, tmp_path, "playground.png")
    assert page.problems() == []


def test_a_bad_parameter_shows_the_apis_error_in_the_page(served, browser):
    page = open_playground(browser, served)
    cases = [
        ("def ", {"top_p": "5"}, {"top_p": 5}, "top_p"),
        ("def ", {"max_tokens": "2.5"}, {"max_tokens": 2.5}, "max_tokens"),
        ("def ", {"temperature": "hot"}, {"temperature": "hot"}, "temperature"),
        ("def " * 40, {}, {}, "prompt"),
    ]  # longer than the 24-token context
    for prompt, typed, request, field in cases:
        fill_request(page, prompt, typed)
        assert submit_and_wait(page) == "error"
        status, answer = post(served, dict(request, prompt=prompt, stream=True))
        assert status in (400, 422)
        assert text(page, "#error") == f"HTTP {status}: {json.loads(answer)['error']['message']}"
        assert page.evaluate("document.getElementById('error').hidden") is False
        invalid = page.evaluate("[...document.querySelectorAll('[aria-invalid=true]')].map(e => e.id)")
        assert invalid == [field] == [json.loads(answer)["error"]["param"]]
    fill_request(page, "def ", {"max_tokens": "3"})  # a good request afterwards clears the error
    assert submit_and_wait(page) == "done"
    assert page.evaluate("document.getElementById('error').hidden") is True
    assert page.evaluate("document.querySelectorAll('[aria-invalid]').length") == 0
    assert page.problems() == []


def test_the_page_shows_the_model_and_offers_chat(served, browser):
    card = json.loads(urllib.request.urlopen(served + "/v1/models").read())["data"][0]
    page = open_playground(browser, served)
    # loading the page asks for nothing that fails (no probe answered 405), and logs no error at all
    failed = [
        e["params"]["entry"]
        for e in browser.events
        if e.get("sessionId") == page.session
        and e.get("method") == "Log.entryAdded"
        and e["params"]["entry"].get("level") == "error"
    ]
    assert failed == [] and page.problems() == []
    assert text(page, "#model-name") == card["id"]
    assert text(page, "#model-context") == f"{card['context_length']} tokens"
    assert page.evaluate("document.getElementById('model-params').title") == f"{card['parameters']:,} parameters"
    assert card["tokenizer"]["fingerprint"] in text(page, "#model-tokenizer")
    assert f"{card['tokenizer']['vocab_size']} tokens" in text(page, "#model-tokenizer")
    # the default max_tokens (64) is brought within this model's context
    assert page.evaluate("document.getElementById('max_tokens').value") == str(min(64, card["context_length"]))

    # fields filled from the address
    linked = browser.open(served + "/?prompt=def%20f&max_tokens=7&seed=42&stop=x&stop=%5Cn")
    linked.wait_for("document.body.dataset.state === 'idle'")
    assert linked.evaluate("['prompt', 'max_tokens', 'seed', 'stop'].map(id => document.getElementById(id).value)") == [
        "def f",
        "7",
        "42",
        "x\n\\n",
    ]

    assert page.evaluate("document.getElementById('mode-chat').disabled") is False
    page.evaluate("document.getElementById('mode-chat').click()")
    assert page.evaluate("document.getElementById('transcript').hidden") is False
    fill_request(page, "hello", {"max_tokens": "8", "temperature": "0.9", "seed": "3"})
    assert submit_and_wait(page) == "done", text(page, "#error")
    request = urllib.request.Request(
        served + "/v1/chat/completions",
        headers={"Content-Type": "application/json"},
        data=json.dumps(
            {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 8, "temperature": 0.9, "seed": 3}
        ).encode(),
    )
    answer = json.loads(urllib.request.urlopen(request).read())
    assert text(page, "#transcript li:last-child span:last-child") == answer["choices"][0]["message"]["content"]


CONTRAST = """(() => {
  const rgb = (c) => (c.match(/[\\d.]+/g) || []).map(Number);
  const background = (el) => {
    for (; el; el = el.parentElement) {
      const c = rgb(getComputedStyle(el).backgroundColor);
      if (c.length === 3 || c[3] > 0) return c.slice(0, 3);
    }
    return [255, 255, 255];
  };
  const seen = [];
  const text = 'h1, h2, dt, dd, label, legend, .hint, #stats, #output-prompt, #completion, summary, ' +
               'button:not(:disabled), textarea, input:not([type=radio])';
  for (const el of document.querySelectorAll(text)) {
    if (!el.offsetParent) continue;  // not shown
    seen.push([el.id || el.tagName, rgb(getComputedStyle(el).color).slice(0, 3), background(el)]);
  }
  return seen;
})()"""


def contrast(a, b):
    def luminance(rgb):
        c = [v / 255 for v in rgb]
        c = [v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4 for v in c]
        return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2]

    high, low = sorted((luminance(a), luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def test_phone_sized_labelled_readable_and_usable_by_touch(served, browser, tmp_path):
    page = open_playground(browser, served, PHONE, mobile=True)
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")  # no sideways scrolling
    unlabelled = page.evaluate(
        "[...document.querySelectorAll('input, textarea')].filter(e => !e.labels.length).map(e => e.id || e.name)"
    )
    assert unlabelled == []
    assert page.evaluate("document.getElementById('generate').getBoundingClientRect().height") >= 44  # touch size
    fill_request(page, "def ", {"max_tokens": "12", "seed": "1", "temperature": "0.8", "top_k": "40"})
    assert submit_and_wait(page, lambda: page.evaluate("document.getElementById('generate').click()")) == "done"
    _, answer = post(served, {"prompt": "def ", "max_tokens": 12, "seed": 1, "temperature": 0.8, "top_k": 40})
    assert text(page, "#completion") == json.loads(answer)["choices"][0]["text"]
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    save_screenshot(page, tmp_path, "playground-phone.png")
    for scheme in ("light", "dark"):  # WCAG AA: 4.5:1 for text
        page.call("Emulation.setEmulatedMedia", features=[{"name": "prefers-color-scheme", "value": scheme}])
        seen = page.evaluate(CONTRAST)
        assert len(seen) > 20
        low = [(name, fg, bg, round(contrast(fg, bg), 2)) for name, fg, bg in seen if contrast(fg, bg) < 4.5]
        assert low == [], scheme
    assert page.problems() == []


def test_the_page_is_self_contained_and_no_ui_turns_it_off(served, trained_run):
    with urllib.request.urlopen(served + "/") as r:
        html = r.read().decode()
        assert r.headers["Content-Type"].startswith("text/html")
        assert "default-src 'none'" in r.headers["Content-Security-Policy"]  # the browser may load nothing else
    assert not re.search(r"https?://|\bsrc=|<link[^>]+href=\"(?!data:)", html)  # no CDN, works offline
    proc, url = _serve(trained_run, "--no_ui")
    try:
        status, body = get(url + "/")
        assert status == 404 and "error" in json.loads(body)
        assert get(url + "/v1/models")[0] == 200
    finally:
        proc.terminate()
        proc.wait(timeout=10)


# `long_server` is test_server's fixture (imported above); ruff's F811 takes the parameter for a redefinition
def test_stop_and_escape_stop_a_running_generation_and_the_server_cancels_it(long_server, browser):  # noqa: F811
    """Against a model with a 4096-token context and random weights (a request for 4000 tokens runs for
    seconds): the page stops streaming and keeps what came, and the server frees the sequence's slot
    (the client went away)."""
    url, scheduler = long_server
    page = open_playground(browser, url)
    stops = [
        lambda: page.evaluate("document.getElementById('stop-button').click()"),
        lambda: page.press("Escape", "Escape", 27),
    ]
    for i, stop in enumerate(stops):
        fill_request(page, "def ", {"max_tokens": "4000", "seed": str(i), "temperature": "1"})
        page.press("Enter", "Enter", 13, modifiers=4)  # Cmd+Enter, as on a Mac
        page.wait_for("document.getElementById('completion').textContent.length >= 5")
        assert page.evaluate("document.getElementById('stop-button').disabled") is False
        stop()
        assert page.wait_for("document.body.dataset.state === 'stopped'")
        shown = text(page, "#completion")
        assert text(page, "#stats").endswith("stopped")
        deadline = time.monotonic() + 15
        while scheduler.load()["running"] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert scheduler.load()["running"] == 0  # the server cancelled the generation
        time.sleep(0.2)
        assert text(page, "#completion") == shown  # nothing more arrived after the stop
    assert page.problems() == []
