"""A stand-in for pytest's ``request`` when a test calls a gate function directly (the
mutation tests, the stage tests): the gates hand the engine's answer over through
``request.node.stash`` (``specgate.run.case_answers.keep``), which this one simply holds."""

from __future__ import annotations

import types


def gate_request() -> types.SimpleNamespace:
    return types.SimpleNamespace(node=types.SimpleNamespace(stash={}))
