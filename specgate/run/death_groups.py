"""A death and what it cost are one cause (``specgate.run.triage``).

When the engine dies, the crash-loop rules (``specgate.run.crashloop``) stop asking:
the rest of a row, or every case of a model the engine cannot load, is ``error`` without
being asked (``not asked: …``). Grouped by message alone, one crash would read as
several causes: the request that killed the engine (a server's "Remote end closed
connection"), the requests that met it gone ("Connection refused"), and the cases never
asked. Here each not-asked group joins the groups of the deaths that cut it:

* the death its message quotes (``last death: …``: the same message kind, its first line);
* for a streak (``died on N consecutive requests of …``), the row's ``N`` requests just
  before its first not-asked case;
* for a model cut (``died on its first N requests about model …``), the model's error
  cases before its first not-asked case (at most ``N``).

The joined group is headed by the earliest death and lists where each part shows.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from specgate.run.crashloop import NOT_ASKED
from specgate.run.signatures import kind

_LAST_DEATH = re.compile(r"\((?:its )?last death: (.*)\)\s*$", re.S)
_STREAK = re.compile(r"died on (\d+) consecutive requests of ")
_MODEL_CUT = re.compile(r"died on its first (\d+) requests about model ")


def _not_asked(record: Any) -> bool:
    return record.outcome == "error" and record.message.startswith(NOT_ASKED)


def _deaths_cutting(cut: Any, records: Sequence[Any]) -> list[Any]:
    """The death records that cut ``cut`` (a not-asked record), from the run's ``records``
    in run order."""
    found: list[Any] = []
    if m := _LAST_DEATH.search(cut.message):
        said = kind(m.group(1), cut.model)
        found += [
            r
            for r in records
            if r.outcome == "error" and not _not_asked(r) and r.stage == cut.stage and r.model == cut.model
            and said.startswith(kind(r.message, r.model, getattr(r, "case", "")))
        ]  # fmt: skip
    if m := _STREAK.search(cut.message):
        row = [r for r in records if (r.stage, r.model) == (cut.stage, cut.model)]
        first = next(i for i, r in enumerate(row) if _not_asked(r))
        found += [r for r in row[max(0, first - int(m.group(1))) : first] if r.outcome == "error"]
    if m := _MODEL_CUT.search(cut.message):
        of_model = [r for r in records if r.model == cut.model]
        first = next(i for i, r in enumerate(of_model) if _not_asked(r))
        before = [r for r in of_model[:first] if r.outcome == "error" and not _not_asked(r)]
        found += before[-int(m.group(1)) :]
    return found


def join_deaths(groups: list[Any], records: Sequence[Any], joined: Callable[[list[Any]], Any]) -> list[Any]:
    """``groups`` with each not-asked group and the groups of the deaths that cut it made one
    (``joined`` builds it from its parts, earliest death first); the others unchanged, in order."""
    owner = {r.nodeid: i for i, g in enumerate(groups) for r in g.records}
    order = {r.nodeid: k for k, r in enumerate(records)}
    parent = list(range(len(groups)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, group in enumerate(groups):
        if not _not_asked(group.records[0]):
            continue
        cuts = {(r.stage, r.model, r.message): r for r in group.records if _not_asked(r)}
        for cut in cuts.values():
            for death in _deaths_cutting(cut, records):
                if death.nodeid in owner:
                    parent[root(owner[death.nodeid])] = root(i)
    members: dict[int, list[int]] = {}
    for i in range(len(groups)):
        members.setdefault(root(i), []).append(i)
    out = []
    for i, group in enumerate(groups):
        parts = members[root(i)]
        if len(parts) == 1:
            out.append(group)
        elif i == min(parts):  # the joined group stands where its first part stood
            ordered = sorted(
                (groups[p] for p in parts),
                key=lambda g: (_not_asked(g.records[0]), min(order.get(r.nodeid, 0) for r in g.records)),
            )
            out.append(joined(ordered))
    return out
