"""The lock of the references: ``constraints/references.txt``.

The snapshots are only as trustworthy as the references that wrote them. The lock
names the exact release of every reference (transformers, tokenizers, llama.cpp
through llama-cpp-python, tiktoken, CPython ``regex``) and of every library whose
behaviour the oracle mirrors (jinja2, gguf, numpy, torch) or that the suite
depends on (hypothesis, pytest). The nox sessions install with
``-c constraints/references.txt``, so a fresh clone checks against exactly what the
snapshots were recorded with; ``nox -s references-latest`` tries the newest
releases instead and reports the drift.

``python -m specgate.upkeep.lock`` prints, for each locked package, the locked and the
installed version (the sessions run it so their log shows what was installed).
"""

from __future__ import annotations

import hashlib
import re
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOCK_FILE = ROOT / "constraints" / "references.txt"

#: The references whose newer releases ``nox -s references-latest`` tries, in report order
#: (distribution names; llama.cpp is reached through llama-cpp-python).
REFERENCES = ("transformers", "tokenizers", "llama-cpp-python", "tiktoken", "regex", "jinja2")

_LINE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([0-9][0-9A-Za-z.+!-]*)$")


class LockError(Exception):
    """The lock file is missing or holds a line that is not ``name==version``."""


def canonical(name: str) -> str:
    """Distribution names compare case-insensitively with ``-``, ``_`` and ``.`` alike (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse(text: str, origin: str = "lock") -> dict[str, str]:
    """``name -> version`` from a constraints file: one ``name==version`` per line, ``#`` comments."""
    pins: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = _LINE.match(line)
        if match is None:
            raise LockError(f"{origin}:{number}: expected 'name==version', got {raw.strip()!r}")
        name = canonical(match.group(1))
        if name in pins:
            raise LockError(f"{origin}:{number}: {name} is locked twice")
        pins[name] = match.group(2)
    return pins


def locked(path: Path = LOCK_FILE) -> dict[str, str]:
    """The locked versions, by canonical distribution name."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise LockError(f"cannot read the reference lock {path}: {exc.strerror or exc}") from exc
    return parse(text, origin=path.name)


def sha256(path: Path = LOCK_FILE) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def installed(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def same_release(locked_version: str, installed_version: str | None) -> bool:
    """``2.13.0`` is satisfied by ``2.13.0+cpu``: pip's ``==`` ignores a local label the pin lacks."""
    if installed_version is None:
        return False
    if "+" in locked_version:
        return locked_version == installed_version
    return installed_version.split("+", 1)[0] == locked_version


def provenance(packages: dict[str, str], path: Path = LOCK_FILE) -> dict[str, object]:
    """The lock's part of a snapshot's provenance: which lock file (name and sha256), and
    every recorded package whose installed version is not the locked one."""
    if not path.exists():
        return {"file": None, "note": f"no reference lock at {path.name}: versions were not pinned"}
    pins = locked(path)
    off = {
        name: {"locked": pins.get(canonical(name)), "installed": got}
        for name, got in packages.items()
        if pins.get(canonical(name)) is None or not same_release(pins[canonical(name)], got)
    }
    block: dict[str, object] = {"file": path.relative_to(ROOT).as_posix(), "sha256": sha256(path)}
    if off:
        block["off_lock"] = off
    return block


def versions_table(path: Path = LOCK_FILE) -> tuple[str, int]:
    """A table of locked vs installed versions and how many installed ones are off the lock."""
    pins = locked(path)
    lines = [f"reference lock {path.name} (sha256 {sha256(path)[:16]}…)"]
    off = 0
    for name, pin in pins.items():
        got = installed(name)
        mark = "" if got is None or same_release(pin, got) else "   <-- not the locked version"
        off += bool(mark)
        lines.append(
            f"  {name:<22} locked {pin:<14} installed {got or '(not needed here)':<14}{mark}".rstrip()
        )
    return "\n".join(lines), off


def main(argv: list[str] | None = None) -> int:
    """Print locked vs installed versions; ``--strict`` exits 1 when an installed one is off the lock."""
    args = sys.argv[1:] if argv is None else argv
    try:
        table, off = versions_table()
    except LockError as exc:
        print(f"specgate: {exc}", file=sys.stderr)
        return 2
    print(table)
    return 1 if off and "--strict" in args else 0


if __name__ == "__main__":
    sys.exit(main())
