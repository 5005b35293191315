"""Crash loops cut short, and a model the engine cannot load asked about once.

An engine that dies on every request is restarted for every case: with a slow load
that is minutes or hours of nothing learnt. Two rules, both counting request-time
deaths of the engine (``impl.protocol.EngineDied``: it crashed, or was killed for
hanging or breaking the protocol):

* **A model it dies loading.** ``MODEL_DEATHS_TO_CUT`` (2) deaths on the first requests
  about a model the engine has not answered anything about yet in this process of the
  run are taken as the engine dying while loading that model (an engine loads a model
  on the first request that names it): every later case of the model, in every row, is
  ``error`` without being asked (``NotAsked``) at once, and the note says so once for
  the model, with the death's reason. Not one death: a single death on a model's first
  request may be a transient fault, which costs one case (``tests/engines/
  test_parity_cmd.py``); a death while loading repeats on the next request. (Requests
  that carry no model — the sampler's, the construct templates' — never count here.)
* **A crash loop within a row.** Within one (stage row, model) — the matrix's row,
  e.g. ``encode`` · ``qwen3-vocab`` or ``logits/quantized`` · a model — the rest of the
  row is ``error`` without being asked once the engine died on ``DEATHS_TO_CUT``
  consecutive requests of the row, or on ``DEATHS_IN_WINDOW`` of the row's last
  ``WINDOW`` requests (a rate, not a streak: an engine that crashes or hangs on every
  other request is cut too; one that hangs on every request would otherwise wait the
  whole deadline on every case — at the default 60 s, ~17 h for a 1,028-case row). Any
  other outcome (pass, fail, refused, an error the engine reported) is an answer: it
  ends a streak, and it fills the window's slot.

A death is ``impl.protocol.EngineDied``: a ``cmd:`` engine crashed, or was killed for
hanging past ``SPECGATE_CMD_TIMEOUT`` or for breaking the protocol; an ``http:``
server is gone, or did not answer a request in full within ``SPECGATE_HTTP_TIMEOUT``.

The run says so in one line per model or row cut (``notes``, in the terminal and the
reports).

The counter lives in the run's session object (``SpecgateSession.crash_loops``), one
per pytest process: under pytest-xdist each worker counts the deaths of the engine it
runs, so a row split over workers is cut on each worker after its own deaths (with
``--dist loadfile``, as the fast tier runs, a row is on one worker). The notes are
derived from the records, which reach the controller.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict, deque
from dataclasses import dataclass, field
from typing import Any

import pytest

from impl.protocol import EngineDied, EngineError

DEATHS_TO_CUT = 3
#: Deaths before any answer about a model that cut the whole model (see above).
MODEL_DEATHS_TO_CUT = 2
#: The rate: this many deaths among the row's last ``WINDOW`` requests.
DEATHS_IN_WINDOW = 4
WINDOW = 8
#: The start of every not-asked case's message (also how ``notes`` finds them in records).
NOT_ASKED = "not asked:"
#: Outcomes in which the engine answered (an error it reported included, unless it died).
ANSWERED = ("pass", "fail", "refused", "error")
#: Rows whose requests name no model (the sampler's logits; the construct templates'
#: pseudo model ``specgate.upkeep.corpus.CONSTRUCTS_MODEL_ID``): no model is loaded for them.
MODEL_FREE_STAGES = ("sample",)
MODEL_FREE_MODELS = ("constructs",)
#: How a not-asked message of a model cut names its model and its death (``notes`` reads it).
_MODEL_CUT = re.compile(
    r"^not asked: the engine died on its first \d+ requests about model (\S+), .*?\(its last death: (.*)\)$",
    re.S,
)


class NotAsked(EngineError, pytest.fail.Exception):
    """Outcome ``error`` for a case of a row cut short: the engine was not asked. Also a
    pytest failure without a traceback (its one line is all there is to say)."""

    def __init__(self, message: str) -> None:
        pytest.fail.Exception.__init__(self, message, pytrace=False)


def _first_line(exc: BaseException) -> str:
    """A death's reason in one line: the client's first line and the stderr lines that
    carried a message (``EngineDied.stderr``)."""
    why = (str(exc).splitlines() or [type(exc).__name__])[0]
    said = " | ".join(line.strip() for line in getattr(exc, "stderr", []) if line.strip())
    return (f"{why}; its stderr: {said}" if said else why)[:400]


@dataclass
class CrashLoops:
    deaths: Counter[tuple[str, str]] = field(default_factory=Counter)
    recent: dict[tuple[str, str], deque[bool]] = field(default_factory=dict)  # row -> last WINDOW: died?
    cut: dict[tuple[str, str], str] = field(default_factory=dict)  # row -> every later case's message
    answered: set[str] = field(default_factory=set)  # models the engine answered something about
    models_cut: dict[str, str] = field(default_factory=dict)  # model -> every later case's message
    unanswered: Counter[str] = field(default_factory=Counter)  # deaths about a model never answered

    def check(self, row: tuple[str, str]) -> None:
        """Before a case of ``row``: raise ``NotAsked`` if its model or its row was cut short."""
        if row[1] in self.models_cut and _names_model(row):
            raise NotAsked(self.models_cut[row[1]])
        if row in self.cut:
            raise NotAsked(self.cut[row])

    def saw(self, row: tuple[str, str], outcome: str, exc: BaseException | None) -> None:
        """After a case of ``row``: count a death or an answer, cut at any limit."""
        if isinstance(exc, NotAsked):
            return
        model = row[1]
        if isinstance(exc, EngineDied):
            if _names_model(row) and model not in self.answered and model not in self.models_cut:
                self.unanswered[model] += 1
                if self.unanswered[model] >= MODEL_DEATHS_TO_CUT:
                    self.models_cut[model] = (
                        f"{NOT_ASKED} the engine died on its first {MODEL_DEATHS_TO_CUT} requests about model "
                        f"{model}, before answering anything about it (a model it cannot load), so no other "
                        f"case of the model is asked (its last death: {_first_line(exc)})"
                    )
                    return
            self._row_saw(row, exc)
        elif outcome in ANSWERED:
            self.answered.add(model)
            self._row_saw(row, None)

    def _row_saw(self, row: tuple[str, str], death: BaseException | None) -> None:
        """A request of ``row`` answered (``death`` None) or died: the streak and the window."""
        recent = self.recent.setdefault(row, deque(maxlen=WINDOW))
        recent.append(death is not None)
        self.deaths[row] = self.deaths[row] + 1 if death is not None else 0
        if death is None or row in self.cut:
            return
        if self.deaths[row] >= DEATHS_TO_CUT:
            why = f"the engine died on {DEATHS_TO_CUT} consecutive requests"
        elif sum(recent) >= DEATHS_IN_WINDOW:
            why = f"the engine died or hung on {sum(recent)} of its last {len(recent)} requests"
        else:
            return
        last = str(death).splitlines()[0][:300]
        self.cut[row] = (
            f"{NOT_ASKED} {why} of {row[0]} · {row[1]}, so the rest of the row is error without "
            f"being asked (last death: {last})"
        )


def _names_model(row: tuple[str, str]) -> bool:
    """Whether the requests of ``row`` name its model (the engine loads it for them)."""
    stage, model = row
    return stage.split("/")[0] not in MODEL_FREE_STAGES and model not in MODEL_FREE_MODELS


def notes(records: list[Any]) -> list[str]:
    """One line per model the engine died loading and per row cut short, from the gate
    records (whichever process ran them)."""
    skipped: Counter[tuple[str, str]] = Counter()
    models: dict[str, Counter[str]] = defaultdict(Counter)
    deaths: dict[str, str] = {}
    why: dict[tuple[str, str], str] = {}
    for r in records:
        if r.outcome != "error" or not r.message.startswith(NOT_ASKED):
            continue
        cut = _MODEL_CUT.match(r.message)
        if cut:
            models[r.model][r.stage] += 1
            deaths[r.model] = cut.group(2)
        else:
            skipped[(r.stage, r.model)] += 1
            said = r.message.removeprefix(NOT_ASKED).strip().split(f" of {r.stage} · {r.model},")[0]
            why.setdefault((r.stage, r.model), said)
    lines = [
        f"{model}: the engine died on its first {MODEL_DEATHS_TO_CUT} requests about this model (a model it "
        f"cannot load): {deaths[model]} — {_cases(sum(rows.values()))} over {len(rows)} "
        f"row{'s' if len(rows) != 1 else ''} not asked (error)"
        for model, rows in sorted(models.items())
    ]
    return lines + [
        f"{stage} · {model}: crash loop cut short — {why[(stage, model)]}; "
        f"{n} more case{'s' if n != 1 else ''} not asked (error)"
        for (stage, model), n in sorted(skipped.items())
    ]


def _cases(n: int) -> str:
    return f"{n} more case{'s' if n != 1 else ''}"


def worth_shrinking(groups: list[Any]) -> list[Any]:
    """The root-cause groups worth a minimized reproducer: not those of a row cut short
    nor of a model the engine died loading (the engine died on whatever it was asked;
    replaying would only restart it again and again), whose ``shrink_note`` says so."""
    cut = {(r.stage, r.model) for g in groups for r in g.records if r.message.startswith(NOT_ASKED)}
    dead = {r.model for g in groups for r in g.records if _MODEL_CUT.match(r.message)}
    keep = []
    for group in groups:
        if any(r.model in dead for r in group.records):
            group.shrink_note = (
                "the engine died on its first requests about the model (a model it cannot load)"
            )
        elif any((r.stage, r.model) in cut for r in group.records):
            group.shrink_note = (
                "a crash loop: the engine died on every request of its row, whatever the input"
            )
        else:
            keep.append(group)
    return keep
