"""What the Python `confirm.py` scripts under `impl/ecosystem/` share: the report of
each hand reproduction against its reference literal, and ``attempt`` (a call's value or
the exception it raised, a Rust panic included). Standard library only (a confirm
script uses its engine's public API and nothing of specgate); the scripts run as
scripts, so each puts its parent folder on `sys.path` before `import divergences`.
The JavaScript scripts' twin is `divergences.mjs`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any


def report(rows: Iterable[tuple[str, Any, Any]], engine: str, reference: str) -> int:
    """Print one line per ``(what, engine's value, reference's value)`` row, labelled
    ``engine`` / ``reference``; the exit status: 0 while every one still reproduces (the
    values differ), 1 otherwise."""
    still = True
    for what, got, expected in rows:
        reproduces = got != expected
        still &= reproduces
        verdict = "REPRODUCES" if reproduces else "GONE"
        print(f"{verdict}: {what}: {engine} {got!r} vs {reference} {expected!r}")
    return 0 if still else 1


def attempt(call: Callable[[], Any]) -> Any:
    """The call's value, or the name of the exception (a Rust panic included) it raised."""
    try:
        return call()
    except BaseException as exc:  # pyo3's PanicException is a BaseException
        if isinstance(exc, KeyboardInterrupt):
            raise
        return f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
