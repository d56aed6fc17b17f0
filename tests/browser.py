"""A page opened in real headless Chromium, driven over the DevTools protocol on a pipe (standard library only).

``render(path)`` loads a local page with every network fetch routed to a dead proxy, and returns what a
person would be told went wrong (console errors, uncaught exceptions, failed loads, requests that left the
machine), the result of a script run in the page, and a screenshot of the whole page as PNG bytes.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome") or ""
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run",
         "--disable-extensions", "--disable-sync", "--proxy-server=127.0.0.1:9", "--remote-debugging-pipe"]
"""--proxy-server points at a port nothing listens on: any fetch from the network fails, as offline."""


@dataclass
class Rendered:
    problems: List[str] = field(default_factory=list)
    network: List[str] = field(default_factory=list)
    """URLs the page asked for beyond the file itself and inline data."""
    value: Any = None
    screenshot: bytes = b""


class _Pipe:
    def __init__(self, profile: Path) -> None:
        to_child, self._writer = os.pipe()
        self._reader, from_child = os.pipe()

        def wire() -> None:
            os.dup2(to_child, 3)
            os.dup2(from_child, 4)

        self.proc = subprocess.Popen([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "about:blank"], pass_fds=(3, 4),
                                     preexec_fn=wire, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_child)
        os.close(from_child)
        self._buffer = b""
        self._next = 0
        self.events: List[Dict[str, Any]] = []

    def call(self, method: str, session: Optional[str] = None, **params: Any) -> Dict[str, Any]:
        self._next += 1
        message: Dict[str, Any] = {"id": self._next, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._writer, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self._next:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]
            self.events.append(reply)

    def wait_for(self, method: str) -> None:
        while not any(e.get("method") == method for e in self.events):
            self.events.append(self._read())

    def _read(self) -> Dict[str, Any]:
        while b"\0" not in self._buffer:
            chunk = os.read(self._reader, 1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except (RuntimeError, OSError):
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._writer)
        os.close(self._reader)


def _problems(events: List[Dict[str, Any]]) -> List[str]:
    found = []
    for event in events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert", "warning"):
            found.append(f"console.{params['type']}: " + " ".join(str(a.get("value", a.get("description"))) for a in params["args"]))
        elif method == "Runtime.exceptionThrown":
            found.append("uncaught: " + params["exceptionDetails"].get("exception", {}).get("description", params["exceptionDetails"]["text"]))
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            found.append(f"log: {params['entry']['text']}")
        elif method == "Network.loadingFailed" and not params.get("canceled"):
            found.append(f"failed to load: {params['errorText']}")
    return found


def render(page: Path, script: str, profile: Path, width: int = 1000) -> Rendered:
    """Open ``page``, wait for its load event, run ``script`` in it, and screenshot the whole page."""
    pipe = _Pipe(profile)
    try:
        target = pipe.call("Target.createTarget", url="about:blank")["targetId"]
        session = pipe.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Runtime", "Log", "Network", "Page"):
            pipe.call(f"{domain}.enable", session)
        pipe.call("Emulation.setDeviceMetricsOverride", session, width=width, height=800, deviceScaleFactor=1, mobile=False)
        pipe.call("Page.navigate", session, url=page.resolve().as_uri())
        pipe.wait_for("Page.loadEventFired")
        value = pipe.call("Runtime.evaluate", session, expression=script, returnByValue=True)["result"].get("value")
        shot = pipe.call("Page.captureScreenshot", session, format="png", captureBeyondViewport=True)["data"]
        requests = [e["params"]["request"]["url"] for e in pipe.events if e.get("method") == "Network.requestWillBeSent"]
        network = [u for u in requests if not u.startswith(("file:", "data:", "about:"))]
        return Rendered(_problems(pipe.events), network, value, base64.b64decode(shot))
    finally:
        pipe.close()
