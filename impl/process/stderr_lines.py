"""The lines of an engine's stderr worth quoting when it dies.

The tail of stderr alone is not enough: a Rust panic's message comes first and its
backtrace frames after it, so the last lines are all frames and the message has
scrolled out of any bounded tail. ``MessageLines`` is fed the stream as it arrives
and keeps, bounded, the lines that carry a message:

* an unindented line naming a panic, a fatal condition, an error, an exception, an
  abort or an assertion (``thread 'main' panicked at …``, ``FATAL: …``,
  ``panic: runtime error …``, ``error: …``, ``terminate called …``);
* the line after a Rust ``panicked at …:`` line (Rust 1.73+ puts the message there);
* the last line of a Python traceback (``ValueError: …``), whatever it says.

Indented lines (backtrace frames, traceback source lines) are never message lines.
Each line is kept from its start (the message), cut at ``width`` characters; only the
last ``keep`` message lines are held, and a line longer than ``max_line`` bytes is
judged on its first ``max_line`` bytes.
"""

from __future__ import annotations

import re
from collections import deque

MESSAGE = re.compile(
    r"panic|fatal|error|exception|abort|assert|terminate called|segmentation fault|core dumped", re.IGNORECASE
)
TRACEBACK = "Traceback (most recent call last)"


class MessageLines:
    def __init__(self, keep: int = 8, width: int = 500, max_line: int = 4096) -> None:
        self._kept: deque[str] = deque(maxlen=keep)
        self._width = width
        self._max_line = max_line
        self._partial = bytearray()
        self._overflow = False  # the current line passed max_line: the rest of it is dropped
        self._in_traceback = False
        self._after_panic = False

    def feed(self, chunk: bytes) -> None:
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end < 0 else chunk[start:end]
            if not self._overflow:
                room = self._max_line - len(self._partial)
                self._partial += piece[:room]
                self._overflow = len(piece) > room
            if end < 0:
                return
            self._line(self._partial.decode("utf-8", errors="replace").rstrip())
            self._partial.clear()
            self._overflow = False
            start = end + 1

    def _line(self, line: str) -> None:
        indented = line[:1] in (" ", "\t")
        if self._after_panic:
            self._after_panic = False
            if line and not indented:
                self._keep(line)
                return
        if line.startswith(TRACEBACK):
            self._in_traceback = True
            return
        if self._in_traceback:
            if indented or not line:
                return
            self._in_traceback = False  # the exception line ends the traceback
            self._keep(line)
            return
        if line and not indented and MESSAGE.search(line):
            self._keep(line)
            self._after_panic = "panicked at" in line and line.endswith(":")

    def _keep(self, line: str) -> None:
        self._kept.append(line if len(line) <= self._width else line[: self._width] + "…")

    def lines(self) -> list[str]:
        return list(self._kept)
