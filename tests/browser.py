"""Drive a headless Chromium over the DevTools protocol (``--remote-debugging-pipe``).

Standard library only: Chromium reads protocol commands from its file descriptor 3 and
writes replies and events to descriptor 4, one JSON message per NUL-terminated chunk.
:func:`render_page` opens a file, waits for its load event, runs a check in the page,
takes a full-page screenshot and returns everything the page complained about (console
errors, uncaught exceptions, failed or blocked loads, requests that left the machine).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "chrome")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--hide-scrollbars",
    "--remote-debugging-pipe",
)
TIMEOUT_S = 60.0  # a bound on a hung browser, not a timing check


def find_browser() -> str | None:
    """Path of an installed Chromium, or None."""
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    return None


@dataclass
class PageReport:
    """What loading a page showed."""

    problems: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    check: Any = None
    screenshot_png: bytes = b""


class _Pipe:
    """One Chromium process and its protocol pipe."""

    def __init__(self, browser: str, profile: str, width: int, height: int) -> None:
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()

        def fds() -> None:  # runs in the child before exec: put the pipe ends at 3 and 4
            os.dup2(to_child_r, 3)
            os.dup2(from_child_w, 4)

        self.proc = subprocess.Popen(
            [
                browser,
                *FLAGS,
                f"--user-data-dir={profile}",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=fds,
            pass_fds=(3, 4),
        )
        os.close(to_child_r)
        os.close(from_child_w)
        self._buf = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []

    def send(
        self, method: str, params: dict[str, Any] | None = None, session: str | None = None
    ) -> Any:
        """Send one command and wait for its reply; events that arrive meanwhile are kept."""
        self._next_id += 1
        msg: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_child, json.dumps(msg).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_event(self, method: str) -> dict[str, Any]:
        """Wait for the first event named ``method`` (kept ones count)."""
        while True:
            for e in self.events:
                if e.get("method") == method:
                    return e
            self.events.append(self._read())

    def _read(self) -> dict[str, Any]:
        deadline = time.monotonic() + TIMEOUT_S
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_child], [], [], left)[0]:
                raise TimeoutError("the browser did not answer")
            chunk = os.read(self._from_child, 1 << 16)
            if not chunk:
                raise RuntimeError("the browser closed its pipe")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return json.loads(raw)

    def close(self) -> None:
        with contextlib.suppress(RuntimeError, TimeoutError, OSError):
            self.send("Browser.close")
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_child)
        os.close(self._from_child)


def render_page(
    browser: str, page: Path, check_js: str, width: int = 1280, height: int = 900
) -> PageReport:
    """Load ``page`` headless; run ``check_js`` (an expression) in it; screenshot the whole page."""
    with tempfile.TemporaryDirectory(prefix="clustersim-chromium-") as profile:
        pipe = _Pipe(browser, profile, width, height)
        try:
            return _visit(pipe, page, check_js)
        finally:
            pipe.close()


def _visit(pipe: _Pipe, page: Path, check_js: str) -> PageReport:
    target = pipe.send("Target.createTarget", {"url": "about:blank"})["targetId"]
    session = pipe.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    for domain in ("Page", "Runtime", "Log", "Network"):
        pipe.send(f"{domain}.enable", session=session)
    pipe.events.clear()
    pipe.send("Page.navigate", {"url": page.resolve().as_uri()}, session)
    pipe.wait_event("Page.loadEventFired")
    check = pipe.send("Runtime.evaluate", {"expression": check_js, "returnByValue": True}, session)
    metrics = pipe.send("Page.getLayoutMetrics", session=session)["cssContentSize"]
    shot = pipe.send(
        "Page.captureScreenshot",
        {
            "format": "png",
            "captureBeyondViewport": True,
            "clip": {
                "x": 0,
                "y": 0,
                "width": metrics["width"],
                "height": metrics["height"],
                "scale": 1,
            },
        },
        session,
    )
    report = PageReport(
        check=check.get("result", {}).get("value"), screenshot_png=base64.b64decode(shot["data"])
    )
    if "exceptionDetails" in check:
        report.problems.append(f"check failed: {check['exceptionDetails'].get('text')}")
    for e in pipe.events:
        report.problems += _problems(e)
        if e.get("method") == "Network.requestWillBeSent":
            report.requests.append(e["params"]["request"]["url"])
    return report


def _problems(event: dict[str, Any]) -> list[str]:
    """Console errors, uncaught exceptions and failed loads in one protocol event."""
    method, p = event.get("method"), event.get("params", {})
    if method == "Runtime.exceptionThrown":
        d = p["exceptionDetails"]
        return [f"exception: {d.get('exception', {}).get('description') or d.get('text')}"]
    if method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
        return [
            "console.error: "
            + " ".join(str(a.get("value", a.get("description"))) for a in p["args"])
        ]
    if method == "Log.entryAdded" and p["entry"]["level"] == "error":
        return [f"log: {p['entry']['text']}"]
    if method == "Network.loadingFailed":
        return [f"load failed: {p.get('errorText')} {p.get('blockedReason') or ''}".strip()]
    return []
