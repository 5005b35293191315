"""Crash loops cut short.

An engine that dies on every request is restarted for every case: with a slow load
that is minutes or hours of nothing learnt; one that hangs on every request waits the
whole deadline on every case (at the default 60 s, ~17 h for a 1,028-case row). Within
one (stage row, model) — the matrix's row, e.g. ``encode`` · ``qwen3-vocab`` or
``logits/quantized`` · a model — the rest of the row is ``error`` without being asked
(``NotAsked``), and the run says so in one line per row (``notes``, in the terminal and
the reports), once

* the engine died on ``DEATHS_TO_CUT`` consecutive requests of the row, or
* it died on ``DEATHS_IN_WINDOW`` of the row's last ``WINDOW`` requests (a rate, not a
  streak: an engine that crashes or hangs on every other request is cut too).

A death is ``impl.protocol.EngineDied``: a ``cmd:`` engine crashed, or was killed for
hanging past ``SPECGATE_CMD_TIMEOUT`` or for breaking the protocol; an ``http:``
server is gone, or did not answer a request in full within ``SPECGATE_HTTP_TIMEOUT``.
Any other outcome (pass, fail, refused, an error the engine reported) is an answer:
it ends a streak, and it fills the window's slot.

The counter lives in the run's session object (``SpecgateSession.crash_loops``), one
per pytest process: under pytest-xdist each worker counts the deaths of the engine it
runs, so a row split over workers is cut on each worker by its own count (with
``--dist loadfile``, as the fast tier runs, a row is on one worker). The notes are
derived from the records, which reach the controller.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

import pytest

from impl.protocol import EngineDied, EngineError

DEATHS_TO_CUT = 3
#: The rate: this many deaths among the row's last ``WINDOW`` requests.
DEATHS_IN_WINDOW = 4
WINDOW = 8
#: The start of every not-asked case's message (also how ``notes`` finds them in records).
NOT_ASKED = "not asked:"
#: Outcomes in which the engine answered (an error it reported included, unless it died).
ANSWERED = ("pass", "fail", "refused", "error")


class NotAsked(EngineError, pytest.fail.Exception):
    """Outcome ``error`` for a case of a row cut short: the engine was not asked. Also a
    pytest failure without a traceback (its one line is all there is to say)."""

    def __init__(self, message: str) -> None:
        pytest.fail.Exception.__init__(self, message, pytrace=False)


@dataclass
class CrashLoops:
    deaths: Counter[tuple[str, str]] = field(default_factory=Counter)  # row -> the current streak
    recent: dict[tuple[str, str], deque[bool]] = field(default_factory=dict)  # row -> last WINDOW: died?
    cut: dict[tuple[str, str], str] = field(default_factory=dict)  # row -> every later case's message

    def check(self, row: tuple[str, str]) -> None:
        """Before a case of ``row`` runs: raise ``NotAsked`` if its row was cut short."""
        if row in self.cut:
            raise NotAsked(self.cut[row])

    def saw(self, row: tuple[str, str], outcome: str, exc: BaseException | None) -> None:
        """After a case of ``row``: count a death or an answer, cut at either limit."""
        if isinstance(exc, NotAsked):
            return
        died = isinstance(exc, EngineDied)
        if not died and outcome not in ANSWERED:
            return  # n/a, a reference disagreement: the engine was not asked
        recent = self.recent.setdefault(row, deque(maxlen=WINDOW))
        recent.append(died)
        self.deaths[row] = self.deaths[row] + 1 if died else 0
        if not died or row in self.cut:
            return
        if self.deaths[row] >= DEATHS_TO_CUT:
            why = f"the engine died on {DEATHS_TO_CUT} consecutive requests"
        elif sum(recent) >= DEATHS_IN_WINDOW:
            why = f"the engine died or hung on {sum(recent)} of its last {len(recent)} requests"
        else:
            return
        last = str(exc).splitlines()[0][:300]
        self.cut[row] = (
            f"{NOT_ASKED} {why} of {row[0]} · {row[1]}, so the rest of the row is error without "
            f"being asked (last death: {last})"
        )


def notes(records: list[Any]) -> list[str]:
    """One line per row cut short, from the gate records (whichever process ran them)."""
    skipped: Counter[tuple[str, str]] = Counter()
    why: dict[tuple[str, str], str] = {}
    for r in records:
        if r.outcome == "error" and r.message.startswith(NOT_ASKED):
            skipped[(r.stage, r.model)] += 1
            said = r.message.removeprefix(NOT_ASKED).strip().split(f" of {r.stage} · {r.model},")[0]
            why.setdefault((r.stage, r.model), said)
    return [
        f"{stage} · {model}: crash loop cut short — {why[(stage, model)]}; "
        f"{n} more case{'s' if n != 1 else ''} not asked (error)"
        for (stage, model), n in sorted(skipped.items())
    ]


def worth_shrinking(groups: list[Any]) -> list[Any]:
    """The root-cause groups worth a minimized reproducer: not those of a row cut short
    (the engine died on whatever it was asked; replaying would only restart it again
    and again), whose ``shrink_note`` says so."""
    cut = {(r.stage, r.model) for g in groups for r in g.records if r.message.startswith(NOT_ASKED)}
    keep = []
    for group in groups:
        if any((r.stage, r.model) in cut for r in group.records):
            group.shrink_note = (
                "a crash loop: the engine died on every request of its row, whatever the input"
            )
        else:
            keep.append(group)
    return keep
