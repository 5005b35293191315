"""pytest-xdist's channel for specgate: what a worker sends the controller when it is
done (its gate records, the engine's self-description, a start-up failure) and how
the controller takes it into its session, so the verdict, the matrix and the reports
cover every worker's cases."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from specgate.outcomes.verdict import GateRecord


def send(state: Any, workeroutput: dict[str, Any]) -> None:
    """On a worker, at the end of its session."""
    # numpy scalars in metrics become floats
    workeroutput["specgate_records"] = json.dumps(
        [dataclasses.asdict(r) for r in state.records], default=float
    )
    workeroutput["specgate_run"] = json.dumps(
        {
            "engine": state.engine_info,
            "startup_failure": state.startup_failure,
            "setup_error": state.setup_error,
        },
        default=str,
    )


def receive(state: Any, workeroutput: dict[str, Any]) -> None:
    """On the controller, when a worker is done."""
    text = workeroutput.get("specgate_records")
    if text:
        state.records.extend(GateRecord(**r) for r in json.loads(text))
        state.records.sort(key=lambda r: r.nodeid)
    run = json.loads(workeroutput.get("specgate_run") or "{}")
    state.engine_info = state.engine_info or run.get("engine")
    state.startup_failure = state.startup_failure or run.get("startup_failure") or ""
    state.setup_error = state.setup_error or run.get("setup_error") or ""
