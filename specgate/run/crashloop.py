"""Crash loops cut short.

An engine that dies on every request is restarted for every case: with a slow load
that is minutes or hours of nothing learnt. After ``DEATHS_TO_CUT`` consecutive
request-time deaths of the engine (``impl.protocol.EngineDied``: it crashed, or was
killed for hanging or breaking the protocol) within one (stage row, model) — the
matrix's row, e.g. ``encode`` · ``qwen3-vocab`` or ``logits/quantized`` · a model —
the rest of that row is ``error`` without being asked (``NotAsked``), and the run
says so in one line per row (``notes``, in the terminal and the reports). The count
resets whenever the engine answers (pass, fail, refused, or an error it reported).

The counter lives in the run's session object (``SpecgateSession.crash_loops``), one
per pytest process: under pytest-xdist each worker counts the deaths of the engine it
runs, so a row split over workers is cut on each worker after its own three
consecutive deaths (with ``--dist loadfile``, as the fast tier runs, a row is on one
worker). The notes are derived from the records, which reach the controller.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest

from impl.protocol import EngineDied, EngineError

DEATHS_TO_CUT = 3
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
    deaths: Counter[tuple[str, str]] = field(default_factory=Counter)
    cut: dict[tuple[str, str], str] = field(default_factory=dict)  # row -> every later case's message

    def check(self, row: tuple[str, str]) -> None:
        """Before a case of ``row`` runs: raise ``NotAsked`` if its row was cut short."""
        if row in self.cut:
            raise NotAsked(self.cut[row])

    def saw(self, row: tuple[str, str], outcome: str, exc: BaseException | None) -> None:
        """After a case of ``row``: count a death, reset on an answer, cut at the limit."""
        if isinstance(exc, NotAsked):
            return
        if isinstance(exc, EngineDied):
            self.deaths[row] += 1
            if self.deaths[row] >= DEATHS_TO_CUT and row not in self.cut:
                last = str(exc).splitlines()[0][:300]
                self.cut[row] = (
                    f"{NOT_ASKED} the engine died on {DEATHS_TO_CUT} consecutive requests of "
                    f"{row[0]} · {row[1]}, so the rest of the row is error without being asked "
                    f"(last death: {last})"
                )
        elif outcome in ANSWERED:
            self.deaths[row] = 0


def notes(records: list[Any]) -> list[str]:
    """One line per row cut short, from the gate records (whichever process ran them)."""
    skipped: Counter[tuple[str, str]] = Counter(
        (r.stage, r.model) for r in records if r.outcome == "error" and r.message.startswith(NOT_ASKED)
    )
    return [
        f"{stage} · {model}: crash loop cut short — the engine died on {DEATHS_TO_CUT} consecutive "
        f"requests; {n} more case{'s' if n != 1 else ''} not asked (error)"
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
