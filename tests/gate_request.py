"""A stand-in for pytest's ``request`` when a test calls a gate function directly (the
mutation tests, the stage tests): the gates hand the engine's answer over through
``request.node.stash`` (``specgate.run.case_answers.keep``), which this one simply holds.
``run_gate`` calls a gate function with one."""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any


def gate_request() -> types.SimpleNamespace:
    return types.SimpleNamespace(node=types.SimpleNamespace(stash={}))


def run_gate(gate: Callable[..., None], engine: Any, *args: Any) -> None:
    """One gate function called directly, as ``nox -s parity`` calls it:
    ``gate(engine, *args)`` (the rest of its fixtures: model, model id, case id, case)
    with a stand-in request that holds the answer it keeps. A pass returns; any other
    outcome raises, as in a run."""
    gate(engine, *args, request=gate_request())
