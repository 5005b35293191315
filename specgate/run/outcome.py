"""A gate case's outcome, from the type of what its test raised (``specgate.outcomes.gate``), and
its record in the session (``GateRecord``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from impl.protocol import EngineError, Unsupported
from specgate import stages
from specgate.outcomes.gate import ReferenceDisagreement, Refused
from specgate.outcomes.verdict import MAX_CARRIED_INPUT, GateRecord
from specgate.run import case_answers
from specgate.run.session import SpecgateSession
from specgate.safe_io import text_safety
from specgate.upkeep import corpus, snapshots


def classify(report: pytest.TestReport, call: pytest.CallInfo[Any] | None, strict: bool) -> tuple[str, str]:
    """The gate outcome of one test report, by the type of what the test raised."""
    exc = call.excinfo.value if call is not None and call.excinfo is not None else None
    if report.passed:
        return "pass", ""
    if isinstance(exc, Refused):
        return ("fail", f"refusal under --strict: {exc.msg}") if strict else ("refused", str(exc.msg))
    if isinstance(exc, ReferenceDisagreement):
        return "reference-disagreement", str(exc.msg)
    if report.skipped:  # NotApplicable, or any other skip (a model missing from a partial cache)
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        return "n/a", reason.removeprefix("Skipped: ").strip()
    if isinstance(exc, EngineError):
        return "error", str(exc)
    if isinstance(exc, (AssertionError, Unsupported)) or (
        exc is not None and isinstance(exc, pytest.fail.Exception)
    ):
        # The gate's own message (model, case, stage, first divergence), without the traceback.
        return "fail", str(getattr(exc, "msg", None) or exc)
    return "fail", report.longreprtext


def record(
    session: SpecgateSession, item: pytest.Item, report: pytest.TestReport, call: Any, stage: str
) -> None:
    """Record one gate test's outcome (the call phase, or a failed or skipped setup) in
    the session; a refusal under ``--strict`` fails in pytest too."""
    params = getattr(item, "callspec", None)
    model_id = params.params.get("model_id", "-") if params else "-"
    if not isinstance(model_id, str):
        return  # an empty parameter set (no model has this stage's snapshot): nothing was gated
    verdict, message = classify(report, call, session.strict)
    message = text_safety.record_message(report, message)  # bounded; inert when pytest prints it
    exc = call.excinfo.value if call.excinfo is not None else None
    session.crash_loops.saw((stage, model_id), verdict, exc)
    if verdict == "fail" and report.skipped:  # a refusal under --strict fails in pytest too
        report.outcome = "failed"
        report.longrepr = message
    props = [p for p in item.user_properties if isinstance(p, tuple) and str(p[0]).startswith("metric:")]
    metrics = {str(k).removeprefix("metric:"): v for k, v in props}
    case_id = str(params.params.get("case_id", "")) if params else ""
    kept = case_answers.record(item, stage, verdict)  # the engine's answer, bounded
    gated = GateRecord(stage, model_id, verdict, item.nodeid, message, metrics, case_id, kept)
    gated.snapshot_root, gated.input = gated_on(session, item, gated)
    session.records.append(gated)


def gated_on(
    session: SpecgateSession, item: pytest.Item, record: GateRecord
) -> tuple[str, dict[str, Any] | None]:
    """What a record keeps of what its case was gated on: the run's ``--snapshot-dir``
    ("" for the package's snapshots, where the construct templates' cases always are),
    and the input of a case that did not pass as triage replays it (``stages.case_input``),
    when it is at most ``MAX_CARRIED_INPUT`` characters of JSON."""
    root = session.snapshot_root
    default = (
        root is None or Path(root) == snapshots.SNAPSHOT_ROOT or record.model == corpus.CONSTRUCTS_MODEL_ID
    )
    carried = None
    case = getattr(item, "funcargs", {}).get("case")
    if record.outcome not in ("pass", "n/a") and isinstance(case, dict) and record.stage in stages.REPLAYABLE:
        try:
            carried = stages.case_input(record.stage, case, record.model == corpus.CONSTRUCTS_MODEL_ID)
        except (KeyError, TypeError, ValueError):
            carried = None  # a case of another shape: read from the snapshot when needed
        if (
            carried is not None
            and len(json.dumps(carried, ensure_ascii=False, default=str)) > MAX_CARRIED_INPUT
        ):
            carried = None
    return ("" if default else str(root)), carried
