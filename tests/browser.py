"""Headless Chromium driven over the Chrome DevTools Protocol, for the tests that open a page in a real browser.

Debian's ``chromium`` (``/usr/bin/chromium``) is started with ``--remote-debugging-port=0`` and a profile
of its own; the port it chose is read from its ``DevToolsActivePort`` file, and one page target is driven
over a websocket (``websockets``' synchronous client). Every console error, uncaught exception and
browser log error is collected, and a page can be evaluated and captured as a PNG. Nothing is downloaded:
the browser is the machine's (``.ci/run`` installs it), with the network left to the page itself.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from websockets.sync.client import ClientConnection, connect

CHROMIUM = Path("/usr/bin/chromium")
#: Why a browser test is skipped on a machine without Chromium (pytest -ra prints it).
MISSING = (
    f"{CHROMIUM} is missing: the real-browser tests need Debian's chromium package "
    "(`apt-get install -y chromium`; .ci/run installs it)"
)


class Page:
    """One browser tab: navigate, evaluate, screenshot; what went wrong in it is in :attr:`errors`."""

    def __init__(self, socket: ClientConnection) -> None:
        self.socket = socket
        self.ids = itertools.count(1)
        self.errors: list[str] = []
        self.loaded = False

    def call(self, method: str, timeout: float = 60, **params: Any) -> dict[str, Any]:
        """Send one command and wait for its answer, collecting the events that come meanwhile."""
        call_id = next(self.ids)
        self.socket.send(json.dumps({"id": call_id, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        while True:
            message = json.loads(self.socket.recv(timeout=max(0.1, deadline - time.monotonic())))
            if message.get("id") == call_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self._event(message)

    def _event(self, message: dict[str, Any]) -> None:
        method, params = message.get("method"), message.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            self.errors.append(
                "console: " + " ".join(str(a.get("value", a.get("description"))) for a in params["args"])
            )
        elif method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            self.errors.append("exception: " + details.get("exception", {}).get("description", details.get("text")))
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            entry = params["entry"]
            self.errors.append(f"log ({entry.get('source')}): {entry.get('text')} {entry.get('url', '')}".strip())
        elif method == "Page.loadEventFired":
            self.loaded = True

    def open(self, url: str, timeout: float = 60) -> None:
        """Navigate to ``url`` and wait for its load event."""
        self.loaded = False
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + timeout
        while not self.loaded:
            self._event(json.loads(self.socket.recv(timeout=max(0.1, deadline - time.monotonic()))))

    def evaluate(self, expression: str, timeout: float = 60) -> Any:
        """The value of a JavaScript expression (awaited when it is a promise), as JSON."""
        result = self.call("Runtime.evaluate", timeout, expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"evaluating {expression[:80]!r}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def settle(self, seconds: float) -> None:
        """Let the page run for ``seconds``, collecting what it reports."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                self._event(json.loads(self.socket.recv(timeout=left)))
            except TimeoutError:
                return

    def screenshot(self, path: Path) -> Path:
        """The whole page (not only the window) as a PNG at ``path``."""
        shot = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path


@contextmanager
def chromium(profile: Path, width: int = 1366, height: int = 900) -> Iterator[Page]:
    """A headless Chromium with its own profile under ``profile``, and a page in it (a laptop's window)."""
    profile.mkdir(parents=True, exist_ok=True)
    args = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",  # as root, Chromium refuses to start sandboxed
        "--disable-gpu",
        "--remote-debugging-port=0",
        f"--user-data-dir={profile}",
        f"--window-size={width},{height}",
        "--no-first-run",
        "--no-default-browser-check",
        "about:blank",
    ]
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not (port_file.exists() and port_file.read_text().strip()):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"chromium did not start (exit {process.poll()})")
            time.sleep(0.05)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as answer:
            target = next(t for t in json.load(answer) if t["type"] == "page")
        with connect(target["webSocketDebuggerUrl"], max_size=None, open_timeout=10) as socket:
            page = Page(socket)
            for domain in ("Page", "Runtime", "Log"):
                page.call(f"{domain}.enable")
            page.call(
                "Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False
            )
            yield page
    finally:
        os.killpg(process.pid, 15)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)
            process.wait()
        shutil.rmtree(profile, ignore_errors=True)
