"""Writing report files whatever an engine answered.

An engine's answer is whatever its JSON said, and JSON can carry lone UTF-16 surrogates
(``"\\udcff"``): a JavaScript engine slicing an emoji in half answers one. Such a string
cannot be encoded as UTF-8, so every report file is written with the surrogate spelled
as its escape (``\\udcff``): in Markdown and HTML it shows what the engine said, and in
JSON written with ``ensure_ascii=False`` the escape is JSON's own, so the file reads
back to the very same string.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import BinaryIO


def write_text(path: Path, text: str) -> None:
    """``text`` to ``path`` as UTF-8, lone surrogates written as ``\\uXXXX``."""
    path.write_bytes(text.encode("utf-8", "backslashreplace"))


# ---------------------------------------------------------------------------
# reading files whatever is at the path


class UnsafeFile(Exception):
    """A file that is not read: not a regular file, too large, unreadable (one line)."""


def read_regular(path: Path, limit: int, what: str = "file") -> bytes:
    """The bytes of ``path`` when it is a regular file of at most ``limit`` bytes; else an
    ``UnsafeFile`` naming it. Opened without blocking (a FIFO would wait for a writer
    forever) and checked on the open descriptor (a symlink to ``/dev/zero`` is a character
    device, whose reading never ends); read to at most ``limit`` bytes even if it grows."""
    with _open_regular(path, limit, what) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise UnsafeFile(f"{what} {path} is larger than its bound ({limit} bytes)")
    return data


def check_regular(path: Path, limit: int, what: str = "file") -> None:
    """``read_regular``'s checks without reading the file."""
    with _open_regular(path, limit, what):
        pass


def _open_regular(path: Path, limit: int, what: str) -> BinaryIO:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise UnsafeFile(f"cannot read {path}: {exc.strerror or exc}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):  # checked before fdopen, which refuses a directory
        os.close(fd)
        kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a regular file")
        raise UnsafeFile(f"{what} {path} is a {kind}, not a regular file: not read")
    if st.st_size > limit:
        os.close(fd)
        raise UnsafeFile(f"{what} {path} is larger than its bound ({st.st_size} > {limit} bytes)")
    return os.fdopen(fd, "rb")


_KINDS = (
    (stat.S_ISFIFO, "FIFO"),
    (stat.S_ISCHR, "character device"),
    (stat.S_ISBLK, "block device"),
    (stat.S_ISSOCK, "socket"),
    (stat.S_ISDIR, "directory"),
)


# ---------------------------------------------------------------------------
# names that become path components

#: The longest name used as one path component (a model id, a group id).
MAX_COMPONENT_CHARS = 200


def component_problem(name: str) -> str | None:
    """None when ``name`` is safe as one path component (a folder or file name under a
    directory specgate owns); else why not: empty, ``.`` or ``..``, a path separator, a
    control character, or longer than ``MAX_COMPONENT_CHARS``."""
    if not name:
        return "it is empty"
    if name in (".", ".."):
        return f"{name!r} names a directory itself, not one inside it"
    if "/" in name or "\\" in name:
        return "it contains a path separator"
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in name):
        return "it contains a control character"
    if len(name) > MAX_COMPONENT_CHARS:
        return f"it is longer than {MAX_COMPONENT_CHARS} characters"
    return None


def safe_component(name: str, fallback: str = "unnamed") -> str:
    """``name`` made into a safe path component: every character but ASCII letters,
    digits, ``-`` and ``_`` becomes ``_``, cut to ``MAX_COMPONENT_CHARS`` (``fallback``
    when nothing is left)."""
    cleaned = re.sub(r"[^A-Za-z0-9_-]", "_", name)[:MAX_COMPONENT_CHARS].strip("_")
    return cleaned or fallback


def remove_stale(folder: Path, pattern: str = "*.json") -> int:
    """Remove the files matching ``pattern`` in ``folder`` (a report stem's reproducers,
    before a run writes its own: none is listed from an older run); how many. Symlinks
    are removed themselves, never followed; subfolders are left alone."""
    removed = 0
    for path in sorted(folder.glob(pattern)) if folder.is_dir() else []:
        if path.is_symlink() or path.is_file():
            path.unlink(missing_ok=True)
            removed += 1
    return removed
