"""Writing report files whatever an engine answered.

An engine's answer is whatever its JSON said, and JSON can carry lone UTF-16 surrogates
(``"\\udcff"``): a JavaScript engine slicing an emoji in half answers one. Such a string
cannot be encoded as UTF-8, so every report file is written with the surrogate spelled
as its escape (``\\udcff``): in Markdown and HTML it shows what the engine said, and in
JSON written with ``ensure_ascii=False`` the escape is JSON's own, so the file reads
back to the very same string.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
from pathlib import Path
from typing import Any, BinaryIO


class WriteError(OSError):
    """A report file that could not be written (one line naming it and why)."""


def write_text(path: Path, text: str) -> None:
    """``text`` to ``path`` as UTF-8, lone surrogates written as ``\\uXXXX``; atomically:
    written to a temporary file beside it, then renamed over it, so a full disk or a
    kill leaves the old file or none, never a truncated one. A path that exists and is
    not a regular file (``/dev/full``, a directory, a FIFO) is never written or replaced.
    Any failure is one ``WriteError`` line."""
    write_bytes(path, text.encode("utf-8", "backslashreplace"))


def write_bytes(path: Path, data: bytes) -> None:
    """``data`` to ``path`` as ``write_text`` writes text: atomically, never onto a path
    that is not a regular file, any failure one ``WriteError`` line."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise WriteError(f"cannot write {path}: {exc.strerror or exc}") from None
    else:
        if not stat.S_ISREG(st.st_mode):
            kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a regular file")
            raise WriteError(f"cannot write {path}: it is a {kind}, not a regular file")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise WriteError(f"cannot write {path}: {exc.strerror or exc}") from None


def writable_dir(path: Path) -> str | None:
    """None when ``path`` is (or can be made) a directory a file can be written into;
    else why not, in a few words (a file is there, a read-only or pseudo file system)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        return "it is not a directory"
    except OSError as exc:
        return f"it cannot be made a directory ({exc.strerror or exc})"
    if not path.is_dir():
        return "it is not a directory"
    probe = path / f".specgate-probe-{os.getpid()}"
    try:
        with open(probe, "wb") as f:
            f.write(b"x")
    except OSError as exc:
        return f"no file can be written into it ({exc.strerror or exc})"
    finally:
        with contextlib.suppress(OSError):
            probe.unlink()
    return None


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


#: What parsing a JSON file may cost, estimated before it is parsed (``parsed_cost``).
MAX_PARSED_BYTES = 768 << 20
#: Bytes of Python objects per JSON value, an upper bound (measured: 34 for ``[]``, 38
#: for ``{}``, 67 for ``{"a":1}``, 72 for ``[[1.5]]``, per value counted as below).
BYTES_PER_VALUE = 128


def parsed_cost(data: bytes) -> int:
    """An upper bound on the memory ``json.loads(data)`` takes, counted in one pass of C
    code before parsing: the bytes, their decoded text and the strings made of it (each
    up to 4 bytes a character unless the file is ASCII), and ``BYTES_PER_VALUE`` for
    every ``, : [ {`` (every JSON value but the first follows one of them)."""
    values = sum(data.count(c) for c in (b",", b":", b"[", b"{")) + 1
    return len(data) * (3 if data.isascii() else 9) + BYTES_PER_VALUE * values


def read_json(path: Path, limit: int, what: str = "file", parsed_limit: int = MAX_PARSED_BYTES) -> Any:
    """The JSON value of the regular file ``path`` (``read_regular``'s checks, at most
    ``limit`` bytes), parsed only when ``parsed_cost`` is within ``parsed_limit``; else
    ``UnsafeFile`` with one line: not UTF-8, not JSON, nested too deep, too costly."""
    return parse_json(read_regular(path, limit, what), path, what, parsed_limit)


def parse_json(data: bytes, path: Path, what: str = "file", parsed_limit: int = MAX_PARSED_BYTES) -> Any:
    """``data`` (read from ``path``) parsed as JSON when ``parsed_cost(data)`` is within
    ``parsed_limit``; else ``UnsafeFile`` with one line."""
    cost = parsed_cost(data)
    if cost > parsed_limit:
        raise UnsafeFile(
            f"{what} {path} would take ~{cost >> 20} MiB to parse ({len(data):,} bytes of JSON; "
            f"bound {parsed_limit >> 20} MiB): not read"
        )
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise UnsafeFile(f"{what} {path} is not UTF-8 text (offset {exc.start})") from None
    except RecursionError:
        raise UnsafeFile(f"{what} {path}: JSON nested too deep") from None
    except ValueError as exc:
        raise UnsafeFile(f"{what} {path} is not JSON: {str(exc)[:200]}") from None


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
