"""Bounded reading and writing of a child process's pipes, for the ``cmd`` client.

An engine decides how much it writes; we decide how much of it we hold. Three
rules keep a misbehaving engine from growing our memory or stalling us:

* ``LineReader``: stdout is read in chunks only while an answer is awaited, a line
  may be at most ``max_line`` bytes, and the whole line must arrive before a
  deadline. Between requests nothing is read, so an engine that keeps writing
  blocks on the full pipe instead of filling our memory.
* ``StderrTail``: stderr is drained all the time (an engine must never block on a
  log line), in chunks, keeping only the last ``limit`` bytes — newlines or not — and
  the last few lines that carry a message (``impl.process.stderr_lines``).
* ``write_all``: a request is written without blocking past a deadline, so an
  engine that stops reading its stdin cannot hang us on a large request.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
import time
from typing import IO

from impl.process.stderr_lines import MessageLines

CHUNK = 1 << 20  # bytes per read or write system call


class LineTooLong(Exception):
    """The engine wrote more than ``max_line`` bytes without ending the line."""

    def __init__(self, max_line: int):
        super().__init__(f"a line longer than {max_line} bytes")
        self.max_line = max_line


def _wait(fd: int, deadline: float, for_write: bool = False) -> None:
    """Block until ``fd`` is ready (or hung up), or raise ``TimeoutError`` at the
    deadline. ``poll``, not ``select``: descriptor numbers above 1023 work too."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError
    poller = select.poll()
    poller.register(fd, select.POLLOUT if for_write else select.POLLIN)
    if not poller.poll(remaining * 1000):
        raise TimeoutError


class LineReader:
    """Lines from a pipe, each bounded in size and in time."""

    def __init__(self, stream: IO[bytes], max_line: int):
        self._stream = stream  # kept so the file object does not close the fd under us
        self._fd = stream.fileno()
        self.max_line = max_line
        self._buffer = bytearray()
        self._scanned = 0  # bytes of the buffer already known to hold no newline

    def read_line(self, deadline: float) -> str:
        """The next line (UTF-8, without its newline).

        Raises ``TimeoutError`` at the deadline, ``EOFError`` when the stream ends
        before a newline, ``LineTooLong`` past ``max_line`` bytes and
        ``UnicodeDecodeError`` for bytes that are not UTF-8."""
        while True:
            end = self._buffer.find(b"\n", self._scanned)
            if end >= 0:
                return self._take_line(end)
            self._scanned = len(self._buffer)
            if len(self._buffer) > self.max_line:
                raise LineTooLong(self.max_line)
            _wait(self._fd, deadline)
            # One byte past the bound is enough to know the line is too long.
            chunk = os.read(self._fd, min(CHUNK, self.max_line + 1 - len(self._buffer)))
            if not chunk:
                raise EOFError
            self._buffer += chunk

    def _take_line(self, end: int) -> str:
        """Decode the line ending at ``end`` without copying its bytes first, and keep
        only what follows it (a large line's buffer is released, not kept)."""
        rest = bytearray(self._buffer[end + 1 :])
        try:
            with memoryview(self._buffer) as view:
                return str(view[:end], "utf-8")
        finally:
            self._buffer, self._scanned = rest, 0


class StderrTail:
    """Drains a stream on a daemon thread, keeping its last ``limit`` bytes and, as
    they pass, the lines that carry a message (``impl.process.stderr_lines``)."""

    def __init__(self, stream: IO[bytes], limit: int):
        self._limit = limit
        self._tail = bytearray()
        self._messages = MessageLines()
        self._lock = threading.Lock()
        # The thread owns the stream and closes it at end of stream: closing it from
        # another thread would free the descriptor number while a read is pending.
        threading.Thread(target=self._drain, args=(stream,), daemon=True).start()

    def _drain(self, stream: IO[bytes]) -> None:
        fd = stream.fileno()
        try:
            while chunk := os.read(fd, 1 << 16):
                with self._lock:
                    self._messages.feed(chunk)
                    self._tail += chunk
                    if len(self._tail) > self._limit:
                        del self._tail[: len(self._tail) - self._limit]
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                stream.close()

    def lines(self, count: int, width: int) -> list[str]:
        """The last ``count`` lines kept, each cut to its last ``width`` characters."""
        with self._lock:
            text = self._tail.decode("utf-8", errors="replace")
        lines = [line.rstrip() for line in text.splitlines()][-count:]
        return [line if len(line) <= width else "…" + line[-width:] for line in lines]

    def message_lines(self) -> list[str]:
        """The last few lines that carried a message (a panic, FATAL, an error, a
        traceback's last line), each cut from its end, however long ago they were written."""
        with self._lock:
            return self._messages.lines()


def write_all(stream: IO[bytes], data: bytes, deadline: float) -> None:
    """Write all of ``data`` to a pipe, raising ``TimeoutError`` if the reader does not
    take it before the deadline (``OSError`` if the reader is gone)."""
    fd = stream.fileno()
    os.set_blocking(fd, False)
    with memoryview(data) as view:
        sent = 0
        while sent < len(view):
            _wait(fd, deadline, for_write=True)
            try:
                sent += os.write(fd, view[sent : sent + CHUNK])
            except BlockingIOError:
                continue
