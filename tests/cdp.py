"""A headless chromium driven over the DevTools protocol on a pipe
(``--remote-debugging-pipe``: requests on fd 3, answers on fd 4, each a JSON text
ended by a NUL byte) — no websocket library, no webdriver: a page is loaded, its
script evaluated (clicks, selects, typing), and screenshots taken.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import subprocess
import time
from pathlib import Path
from typing import Any


def _high(fd: int) -> int:
    """``fd`` moved above 9, so it is never the 3 or 4 the child's pipe ends must become."""
    high = fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
    os.close(fd)
    return high


class Chromium:
    def __init__(self, binary: str, profile: Path, width: int = 1300, height: int = 1000) -> None:
        to_child, self._w = (_high(fd) for fd in os.pipe())
        self._r, from_child = (_high(fd) for fd in os.pipe())
        flags = [
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--window-size={width},{height}", f"--user-data-dir={profile}", "--remote-debugging-pipe",
        ]  # fmt: skip
        script = f'exec 3<&{to_child} 4>&{from_child} {to_child}<&- {from_child}>&-; exec "$@"'
        self.proc = subprocess.Popen(
            ["bash", "-c", script, "chromium", binary, *flags, "about:blank"],
            pass_fds=(to_child, from_child),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_child)
        os.close(from_child)
        self._buf = b""
        self._id = 0
        self.events: list[dict[str, Any]] = []
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.call("Page.enable", session=True)
        self.call("Runtime.enable", session=True)

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._r], [], [], left)[0]:
                raise TimeoutError("chromium did not answer in time")
            chunk = os.read(self._r, 1 << 20)
            if not chunk:
                raise RuntimeError(f"chromium closed its pipe (exit {self.proc.poll()})")
            self._buf += chunk
        message, _, self._buf = self._buf.partition(b"\0")
        return json.loads(message)

    def call(self, method: str, session: bool = False, timeout: float = 120, **params: Any) -> dict[str, Any]:
        self._id += 1
        request = {"id": self._id, "method": method, "params": params}
        if session:
            request["sessionId"] = self.session
        os.write(self._w, json.dumps(request).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            message = self._read(deadline)
            if message.get("id") == self._id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self.events.append(message)

    def wait_event(self, method: str, timeout: float = 120) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            for i, event in enumerate(self.events):
                if event.get("method") == method:
                    return self.events.pop(i)
            self.events.append(self._read(deadline))

    def load(self, url: str, timeout: float = 120) -> float:
        """Navigate to ``url`` and wait for its load event; the seconds it took."""
        self.events.clear()
        start = time.monotonic()
        self.call("Page.navigate", session=True, url=url)
        self.wait_event("Page.loadEventFired", timeout)
        return time.monotonic() - start

    def js(self, expression: str) -> Any:
        result = self.call(
            "Runtime.evaluate", session=True, expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", session=True, format="png")["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        try:
            os.close(self._w)
            os.close(self._r)
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
