"""A gated case's record and the run verdict over them: what the plugin collects
during a run and what ``report merge`` recomputes from shards' JSON reports (kept
apart from the plugin so that the report can use them without importing it)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass
class GateRecord:
    stage: str  # a gate stage, or "<stage>/<class>" for the classed stages
    model: str
    outcome: str
    nodeid: str
    message: str = ""
    metrics: dict[str, Any] = field(default_factory=dict)
    case: str = ""  # the snapshot/corpus case id, when the gate has one (to replay it)
    answers: dict[str, str] = field(default_factory=dict)  # bounded answers (``specgate.run.case_answers``)
    # What the case was gated on, so that triage, the case browser and the reproducers read
    # the same (``specgate.upkeep.recorded_cases``): the ``--snapshot-dir`` its snapshot was
    # read from ("" for the package's ``snapshots/``), and the input of a case that did not
    # pass, when at most ``MAX_CARRIED_INPUT`` characters of JSON (else read from the snapshot).
    snapshot_root: str = ""
    input: dict[str, Any] | None = None


#: The most characters of JSON a record carries as its case's input.
MAX_CARRIED_INPUT = 16_384


def run_verdict(records: list[GateRecord]) -> list[str]:
    """Why the run fails beyond its failing cases: a (stage, model) row the engine
    answered only with refusals and errors (a declared stage must be answered), and
    a run in which no case passed at all. Empty when neither holds."""
    problems = []
    rows: dict[tuple[str, str], Counter[str]] = {}
    for r in records:
        rows.setdefault((r.stage, r.model), Counter())[r.outcome] += 1
    for (stage, model), counts in sorted(rows.items()):
        if counts["pass"] == 0 and counts["refused"] > 0:
            problems.append(
                f"{stage} · {model}: no case passed; {counts['refused']} refused, {counts['error']} errors "
                f"(a declared stage answered only by refusals and errors fails)"
            )
    if records and not any(r.outcome == "pass" for r in records):
        gated = Counter(r.outcome for r in records)
        problems.append(
            "no case passed in the whole run ("
            + ", ".join(f"{n} {o}" for o, n in sorted(gated.items()))
            + "): nothing was shown to conform"
        )
    return problems


def verdict_object(records: list[GateRecord], rules: list[str], before: list[str] = ()) -> dict[str, Any]:
    """The run's verdict for the reports: ``{"result": "pass" | "fail", "reasons": [...],
    "rules": [...]}``. Every reason the run fails: ``before`` (the engine did not start,
    crash loops cut short), each row's failed and errored cases, and ``rules``
    (``run_verdict``'s problems, also kept apart under ``rules``)."""
    reasons = list(before)
    rows: dict[tuple[str, str], Counter[str]] = {}
    for r in records:
        rows.setdefault((r.stage, r.model), Counter())[r.outcome] += 1
    for (stage, model), counts in sorted(rows.items()):
        bad = [f"{counts[o]} {word}" for o, word in (("fail", "failed"), ("error", "errors")) if counts[o]]
        if bad:
            reasons.append(f"{stage} · {model}: {', '.join(bad)} of {sum(counts.values())} cases")
    reasons += rules
    return {"result": "fail" if reasons else "pass", "reasons": reasons, "rules": list(rules)}


def rule_problems(payload: dict[str, Any]) -> list[str]:
    """A JSON report's run-verdict rule problems (``verdict.rules``; older reports kept
    them as the ``verdict`` list itself)."""
    verdict = payload.get("verdict", [])
    return list(verdict.get("rules", [])) if isinstance(verdict, dict) else list(verdict)
