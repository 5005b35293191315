"""Ctrl-C during a run: the first stops, the second leaves.

The first SIGINT interrupts what runs (an engine request, a shrinking check) as a
``KeyboardInterrupt``: pytest stops gating, no reproducer is shrunk (no new engine is
started for it; a shrink already under way stops), and the report is written for the
cases gated so far, marked *interrupted* in its verdict (Markdown, JSON and HTML say
so); the run exits with status 130 (128 + SIGINT, the shell's own). A second SIGINT
exits at once, with status 130 and one line: whatever was under way (closing an
engine, writing the report) is abandoned — the engines, in their own process groups
with a parent-death signal (``impl.process.lifeline``), die with us.

A ``SIGTERM`` (a CI job cancelled, ``timeout``, ``kill``) is handled as a first
Ctrl-C: the report is written for what was gated, marked *interrupted (SIGTERM)*, and
the run exits with status 143 (128 + SIGTERM). An interrupt before any case was gated
(the first request hanging, the engine's start-up) still writes the reports, saying so.

The state lives in one ``Interrupts`` object per run, kept in ``config.stash``.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from typing import Any

import pytest

EXIT_INTERRUPTED = 130  # 128 + SIGINT
EXIT_TERMINATED = 143  # 128 + SIGTERM
NOT_SHRUNK = "the run was interrupted (Ctrl-C): not shrunk"


class Interrupts:
    """Counts SIGINTs: the first raises ``KeyboardInterrupt``, the second exits at once."""

    def __init__(self) -> None:
        self.count = 0
        self.signum = signal.SIGINT  # the first interrupt's signal
        self.session: pytest.Session | None = None  # set when the session finishes
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                self._previous[signum] = signal.signal(signum, self._handle)

    def restore(self) -> None:
        if self._previous and threading.current_thread() is threading.main_thread():
            for signum, previous in self._previous.items():
                signal.signal(signum, previous)
            self._previous = {}

    @property
    def status(self) -> int:
        return EXIT_TERMINATED if self.signum == signal.SIGTERM else EXIT_INTERRUPTED

    @property
    def what(self) -> str:
        return "SIGTERM" if self.signum == signal.SIGTERM else "Ctrl-C"

    def _handle(self, signum: int, frame: Any) -> None:
        self.count += 1
        if self.count == 1:
            self.signum = signum
            raise KeyboardInterrupt
        os.write(2, b"\nspecgate: interrupted twice: exiting at once, no report\n")
        os._exit(self.status)


KEY = pytest.StashKey[Interrupts]()


def install(config: pytest.Config) -> None:
    """Take over SIGINT for this run (the controller only: an xdist worker stops with it)."""
    if hasattr(config, "workerinput"):
        return
    config.stash[KEY] = Interrupts()
    config.stash[KEY].install()
    config.add_cleanup(config.stash[KEY].restore)  # the previous handler back after the run


def interrupted(config: pytest.Config) -> bool:
    """Whether the run was interrupted (a SIGINT reached our handler)."""
    handler = config.stash.get(KEY, None)
    return bool(handler is not None and handler.count)


def finish(session: pytest.Session) -> None:
    """At the session's end: an interrupted run exits with status 130."""
    if (handler := session.config.stash.get(KEY, None)) is not None:
        handler.session = session
    if interrupted(session.config):  # pytest's own INTERRUPTED (2) is also a collection error: not this
        session.exitstatus = session.config.stash[KEY].status


def after_shrinking(config: pytest.Config, state: Any) -> None:
    """A first SIGINT while reproducers were shrunk (the gating had finished): the
    shrinking stopped (``triage.shrink_groups``); the run is marked and exits 130 too."""
    handler = config.stash.get(KEY, None)
    if handler is None or not handler.count or handler.session is None:
        return
    if handler.session.exitstatus != handler.status:
        handler.session.exitstatus = handler.status
        state.verdict.append(
            f"INTERRUPTED ({handler.what}) while diagnosing or shrinking reproducers: every case was gated; "
            "groups not shrunk yet have no reproducer"
        )


def verdict(session: pytest.Session, gated: int) -> list[str]:
    """The verdict line of an interrupted run (none for a run that was not)."""
    handler = session.config.stash.get(KEY, None)
    if handler is None or not handler.count:
        return []
    return [
        f"INTERRUPTED ({handler.what}) after {gated} gate case(s) of {session.testscollected} collected: "
        "the report covers only the cases gated before it"
    ]


def guarded(config: pytest.Config, records: list[Any], examine: Callable[[], list[Any]]) -> list[Any]:
    """``examine()`` (``triage.examine``: diagnosing and shrinking); or, when a first
    Ctrl-C lands outside its own guards — an import, the fresh engine's start or close,
    the moments between (a busy machine widens them) — the groups, none shrunk."""
    try:
        return examine()
    except KeyboardInterrupt:
        from specgate.run import triage

        groups = triage.group_records(records)
        skip_shrinking(config, groups)
        return groups


def skip_shrinking(config: pytest.Config, groups: list[Any]) -> bool:
    """After an interrupt nothing is shrunk: each group says so; True then."""
    if not interrupted(config):
        return False
    for group in groups:
        group.shrink_note = NOT_SHRUNK
    return True
