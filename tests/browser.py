"""A headless Chromium driven through the Chrome DevTools Protocol, for the page tests.

No test dependency: Chromium's `--remote-debugging-pipe` takes protocol commands as JSON messages,
each ended by a NUL byte, on its file descriptor 3 and answers on descriptor 4 (what Puppeteer's
`pipe: true` uses), so two OS pipes stand in for a websocket.
"""

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import time

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    return None


class BrowserError(Exception):
    pass


class Browser:
    """One headless Chromium process; `open(url)` gives a Page (a tab) in it."""

    def __init__(self, executable: str, profile_dir, log_path):
        to_browser_r, to_browser_w = os.pipe()
        from_browser_r, from_browser_w = os.pipe()

        def give_pipes():  # in the child, before exec: its fds 3 and 4 become the protocol pipes
            read_end = fcntl.fcntl(to_browser_r, fcntl.F_DUPFD, 10)  # above 4, so dup2 cannot clobber it
            write_end = fcntl.fcntl(from_browser_w, fcntl.F_DUPFD, 10)
            os.dup2(read_end, 3)
            os.dup2(write_end, 4)

        self.log_path = log_path
        with open(log_path, "w") as log:
            self.proc = subprocess.Popen(
                [
                    executable,
                    "--headless",
                    "--remote-debugging-pipe",
                    f"--user-data-dir={profile_dir}",
                    "--no-sandbox",  # root in a container has no user namespaces for the sandbox
                    "--disable-gpu",
                    "--disable-dev-shm-usage",
                    "--no-first-run",
                    "--no-default-browser-check",
                    "--disable-extensions",
                    "--disable-background-networking",
                    "--disable-sync",
                    "--hide-scrollbars",
                    "--mute-audio",
                    "about:blank",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                preexec_fn=give_pipes,
                close_fds=False,
            )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self.writer, self.reader = to_browser_w, from_browser_r
        self.buffer = b""
        self.next_id = 0
        self.events: list[dict] = []  # protocol events read while waiting for something else

    # ------------------------------------------------------------------ the protocol
    def _read_message(self, deadline: float) -> dict:
        while b"\0" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("Chromium did not answer in time")
            ready, _, _ = select.select([self.reader], [], [], left)
            if ready:
                chunk = os.read(self.reader, 1 << 20)
                if not chunk:
                    raise BrowserError(f"Chromium closed the protocol pipe:\n{self._log_tail()}")
                self.buffer += chunk
        message, _, self.buffer = self.buffer.partition(b"\0")
        return json.loads(message)

    def _log_tail(self) -> str:
        try:
            with open(self.log_path) as f:
                return f.read()[-3000:]
        except OSError:
            return ""

    def call(self, method: str, session: str | None = None, timeout: float = 30, **params) -> dict:
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        data = json.dumps(message).encode() + b"\0"
        while data:
            data = data[os.write(self.writer, data) :]
        deadline = time.monotonic() + timeout
        while True:
            answer = self._read_message(deadline)
            if answer.get("id") == self.next_id:
                if "error" in answer:
                    raise BrowserError(f"{method}: {answer['error'].get('message')}")
                return answer.get("result", {})
            self.events.append(answer)

    def wait_event(self, method: str, session: str | None = None, timeout: float = 30) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            for i, event in enumerate(self.events):
                if event.get("method") == method and event.get("sessionId") == session:
                    return self.events.pop(i)["params"]
            self.events.append(self._read_message(deadline))

    def open(self, url: str, width: int = 1280, height: int = 900, mobile: bool = False) -> "Page":
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        page = Page(self, session)
        for domain in ("Page", "Runtime", "Log"):
            page.call(f"{domain}.enable")
        page.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=mobile)
        page.call("Page.navigate", url=url)
        self.wait_event("Page.loadEventFired", session)
        return page

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=5)
        except (BrowserError, TimeoutError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self.writer)
        os.close(self.reader)


class Page:
    """One tab: evaluate JavaScript, type, press keys, take screenshots."""

    def __init__(self, browser: Browser, session: str):
        self.browser, self.session = browser, session

    def call(self, method: str, **params) -> dict:
        return self.browser.call(method, self.session, **params)

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 20):
        """Polls until the expression is truthy; returns its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"still false after {timeout} s: {expression}")
            time.sleep(0.05)

    def fill(self, selector: str, text: str) -> None:
        """Focus the field, select what is in it, and type text over it (as keyboard input events)."""
        self.evaluate(f"(el => {{ el.focus(); el.select(); }})(document.querySelector({json.dumps(selector)}))")
        if text:
            self.call("Input.insertText", text=text)
        else:
            self.press("Delete", "Delete", 46)

    def press(self, key: str, code: str, key_code: int, modifiers: int = 0) -> None:
        """A key press; modifiers: 1 Alt, 2 Ctrl, 4 Meta/Cmd, 8 Shift."""
        common = dict(
            key=key, code=code, windowsVirtualKeyCode=key_code, nativeVirtualKeyCode=key_code, modifiers=modifiers
        )
        self.call("Input.dispatchKeyEvent", type="rawKeyDown", **common)
        self.call("Input.dispatchKeyEvent", type="keyUp", **common)

    def screenshot(self, path) -> None:
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def problems(self) -> list[str]:
        """Uncaught exceptions and console/log errors seen so far in this tab (CSP violations included)."""
        found = []
        for event in self.browser.events:
            if event.get("sessionId") != self.session:
                continue
            params = event.get("params", {})
            if event.get("method") == "Runtime.exceptionThrown":
                found.append(str(params.get("exceptionDetails")))
            elif event.get("method") == "Log.entryAdded":
                entry = params.get("entry", {})
                # a 4xx answer the page shows is logged as a network error: only the page's own count here
                if entry.get("level") == "error" and entry.get("source") != "network":
                    found.append(entry.get("text", ""))
            elif event.get("method") == "Runtime.consoleAPICalled" and params.get("type") == "error":
                found.append(str(params.get("args")))
        return found
