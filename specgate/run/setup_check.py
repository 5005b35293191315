"""Setup problems are setup errors, found before anything runs.

A snapshot file that cannot be read or is not a snapshot, and a snapshot recorded
from another model file than the one the run has (stale: the model changed under its
snapshots) are problems of the setup, not of the engine: the run stops after
collection with one ``ERROR:`` line naming the fix and exit status 4 — never one
outcome per case counted against the engine, never a collection traceback.

``case_ids`` reads a snapshot's case ids for parametrization and remembers a file it
cannot read (the gate gets no cases from it); ``check`` then loads every snapshot the
selected gate cases read (keeping them in the session, so no case reads them again)
and raises ``pytest.UsageError`` with the first problem and how many more there are
(under pytest-xdist a worker runs nothing and the controller reports the line).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from impl.protocol import ModelRef
from specgate.upkeep import corpus, snapshots


def case_ids(problems: list[str], model_id: str, stage: str, root: Path) -> list[str]:
    """The case ids of a snapshot file; ``[]`` (and the problem noted) when it is unreadable."""
    try:
        return list(snapshots.read(model_id, stage, root)["cases"])
    except snapshots.SnapshotError as exc:
        problems.append(str(exc))
        return []


def check(
    config: pytest.Config,
    session: Any,
    items: list[pytest.Item],
    model_of: Callable[[str], ModelRef],
    stage_of: Callable[[pytest.Mark], str],
) -> None:
    """Load (and provenance-check) every snapshot the gate ``items`` read; one usage line
    for the problems found here and while parametrizing."""
    problems = list(dict.fromkeys(session.setup_problems))
    for item in items:
        params = getattr(item, "callspec", None)
        model_id = params.params.get("model_id") if params is not None else None
        gate = item.get_closest_marker("gate")
        if gate is None or not isinstance(model_id, str):
            continue
        stage = stage_of(gate)
        if (model_id, stage) in session.snapshots:
            continue
        if model_id == corpus.CONSTRUCTS_MODEL_ID:
            model, root = corpus.constructs_model(), snapshots.SNAPSHOT_ROOT
        else:
            model, root = model_of(model_id), session.snapshot_root
        try:
            session.snapshots[(model_id, stage)] = snapshots.load(model, stage, root)
        except snapshots.SnapshotError as exc:
            session.snapshots[(model_id, stage)] = {}  # checked once: the run stops below
            problems.append(str(exc))
    if not problems:
        return
    more = f" (and {len(problems) - 1} more setup problems like it)" if len(problems) > 1 else ""
    line = " ".join(problems[0].split()) + more
    if hasattr(config, "workerinput"):  # a pytest-xdist worker cannot stop the run: it runs nothing
        session.setup_error = line  # and the controller reports the line (``stopped``)
        config.hook.pytest_deselected(items=list(items))
        items[:] = []
        return
    raise pytest.UsageError(line)


def stopped(pytest_session: pytest.Session, session: Any) -> bool:
    """On pytest-xdist's controller: a worker's setup problem ends the run as a usage
    error (exit status 4; the terminal summary prints its ``ERROR:`` line)."""
    if not session.setup_error:
        return False
    pytest_session.exitstatus = pytest.ExitCode.USAGE_ERROR
    return True
