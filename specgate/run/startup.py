"""An engine that does not start: one line with its own reason, and a report.

The reason is the client's first line (what went wrong: it exited before its
handshake, with its exit status; it hung; it said something else) followed by the
lines of its stderr that carry a message (``EngineDied.stderr``: a ``FATAL: …``, a
panic, a traceback's last line — else its last lines), bounded to ``REASON_CHARS``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from impl.protocol import EngineDied, EngineError

REASON_CHARS = 800


def reason(spec: str, exc: EngineError) -> str:
    """``specgate: the engine SPEC did not start: WHY; its stderr: LINES`` on one line."""
    why = (str(exc).splitlines() or [type(exc).__name__])[0]
    said = " | ".join(line.strip() for line in getattr(exc, "stderr", []) if line.strip())
    if said and isinstance(exc, EngineDied):
        why += f"; its stderr: {said}"
    line = f"specgate: the engine {spec!r} did not start: {why}"
    return line if len(line) <= REASON_CHARS else line[: REASON_CHARS - 1] + "…"


def attach_provenance(state: Any, config: Any, models_of: Callable, stages_of: Callable) -> None:
    """Give the session its report provenance (``specgate.run.provenance.run``); ``models_of``
    and ``stages_of`` give the run's selected models and stages from its config."""
    from specgate.run import provenance

    models, stages = models_of(config), stages_of(config)
    state.provenance = provenance.run(
        state.engine_info,
        ["pytest", *config.invocation_params.args],
        models,
        sorted(stages) if stages else None,
        state.shard,
    )
