"""A small headless-Chromium driver for the report's browser test (tests/test_report.py),
and its own test. It speaks the DevTools protocol over a pipe (--remote-debugging-pipe, file
descriptors 3 and 4): no websocket library, no Playwright, no open port. It opens a file://
page, collects console errors, exceptions and every request the page makes, evaluates a DOM
probe and takes a full-page screenshot.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

CANDIDATES = ("/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome")
FLAGS = (
    "--headless",
    "--no-sandbox",  # root in a container: the setuid sandbox is unavailable
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--hide-scrollbars",
    "--remote-debugging-pipe",
)


def find_browser() -> str | None:
    """The path of a Chromium that runs here, or None."""
    for name in CANDIDATES:
        path = shutil.which(name) or (name if os.path.isfile(name) else None)
        if path and os.access(path, os.X_OK):
            return path
    return None


@dataclass
class Visit:
    """What one page load showed: console errors, requests, the probe's value, the PNG."""

    errors: list[str] = field(default_factory=list)  # console errors and exceptions
    requests: list[str] = field(default_factory=list)  # every URL the page asked for
    probe: object = None
    screenshot: bytes = b""


class Chromium:
    """One headless Chromium process spoken to over the DevTools pipe."""

    def __init__(self, binary: str, width: int = 1400, height: int = 1000):
        self.profile = tempfile.mkdtemp(prefix="arl-chromium-")
        to_child, self._w = os.pipe()
        self._r, from_child = os.pipe()

        def wire() -> None:  # in the child: the pipe on fds 3 (commands) and 4 (replies)
            a, b = os.dup(to_child), os.dup(from_child)
            os.dup2(a, 3)
            os.dup2(b, 4)
            os.set_inheritable(3, True)
            os.set_inheritable(4, True)

        self.proc = subprocess.Popen(
            [binary, *FLAGS, f"--window-size={width},{height}", f"--user-data-dir={self.profile}"],
            preexec_fn=wire,
            close_fds=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_child)
        os.close(from_child)
        self._buf, self._id, self.events = b"", 0, []

    def send(self, method: str, params: dict | None = None, session: str | None = None):
        """Send one command and return its result (events that arrive meanwhile are kept)."""
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        while True:
            reply = self._next(timeout=60)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def _next(self, timeout: float) -> dict:
        import select

        end = time.monotonic() + timeout
        while b"\0" not in self._buf:
            left = end - time.monotonic()
            if left <= 0 or not select.select([self._r], [], [], left)[0]:
                raise TimeoutError("Chromium did not answer")
            chunk = os.read(self._r, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium closed the pipe")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return json.loads(raw)

    def wait_for(self, method: str, timeout: float = 60) -> dict:
        """Read until the event `method` arrives (keeping the others)."""
        for i, e in enumerate(self.events):
            if e.get("method") == method:
                return self.events.pop(i)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            e = self._next(timeout=end - time.monotonic())
            if e.get("method") == method:
                return e
            self.events.append(e)
        raise TimeoutError(f"no {method}")

    def visit(self, url: str, probe: str) -> Visit:
        """Load `url` in a fresh page; the errors, requests, probe value and a screenshot."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"
        ]
        for domain in ("Runtime", "Log", "Page", "Network"):
            self.send(f"{domain}.enable", session=session)
        self.events.clear()
        self.send("Page.navigate", {"url": url}, session=session)
        self.wait_for("Page.loadEventFired")
        out = Visit()
        out.probe = self.send(
            "Runtime.evaluate", {"expression": probe, "returnByValue": True}, session=session
        )["result"].get("value")
        shot = self.send(
            "Page.captureScreenshot",
            {"format": "png", "captureBeyondViewport": True},
            session=session,
        )
        out.screenshot = base64.b64decode(shot["data"])
        for e in self.events:
            p = e.get("params", {})
            if e.get("method") == "Runtime.consoleAPICalled" and p.get("type") in (
                "error",
                "assert",
            ):
                out.errors.append(" ".join(str(a.get("value")) for a in p.get("args", [])))
            elif e.get("method") == "Runtime.exceptionThrown":
                out.errors.append(str(p.get("exceptionDetails", {}).get("text")))
            elif e.get("method") == "Log.entryAdded" and p["entry"].get("level") == "error":
                out.errors.append(p["entry"].get("text", ""))
            elif e.get("method") == "Network.requestWillBeSent":
                out.requests.append(p["request"]["url"])
        self.send("Target.closeTarget", {"targetId": target})
        return out

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (OSError, RuntimeError, TimeoutError):
            pass
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._w)
        os.close(self._r)
        shutil.rmtree(self.profile, ignore_errors=True)


def screenshot_page(binary: str, html: Path, png: Path, probe: str = "null") -> Visit:
    """Open one file in a fresh Chromium, save its full-page screenshot to `png`."""
    browser = Chromium(binary)
    try:
        visit = browser.visit(html.resolve().as_uri(), probe)
    finally:
        browser.close()
    png.write_bytes(visit.screenshot)
    return visit


BROKEN = """<!DOCTYPE html><html><head><meta charset="utf-8"></head><body>
<svg width="200" height="100"><rect width="50" height="50"/></svg>
<img src="http://192.0.2.1/figure.png"><img src="missing.png">
<script>console.error("a script error"); undefined_function();</script></body></html>"""


def test_the_driver_sees_console_errors_exceptions_and_requests(tmp_path):
    """The checks the report's browser test relies on can fail: a page with a console error,
    an exception, a missing file and an outside address is caught on every count."""
    import pytest

    binary = find_browser()
    if binary is None:
        pytest.skip("no Chromium here (apt-get install chromium): the browser test is skipped")
    page = tmp_path / "broken.html"
    page.write_text(BROKEN)
    visit = screenshot_page(
        binary, page, tmp_path / "broken.png", "document.querySelectorAll('svg').length"
    )
    assert visit.probe == 1
    assert "a script error" in visit.errors
    assert any("undefined_function" in e or "Uncaught" in e for e in visit.errors), visit.errors
    assert any("ERR_FILE_NOT_FOUND" in e for e in visit.errors), visit.errors
    assert "http://192.0.2.1/figure.png" in visit.requests
    assert (tmp_path / "broken.png").read_bytes().startswith(b"\x89PNG")
