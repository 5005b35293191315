"""The gate stages, each one object (``Stage``): its name, the protocol operation it
needs, its conformance classes, its snapshot, how a recorded case becomes a replayable
input and how an input is replayed against the oracle (``specgate.run.triage`` shrinks with
it, ``specgate repro`` and the search replay with it).

``STAGES`` is the one registry: the plugin's stage selection and usage check, the
parametrization of classed stages, triage, the search and the ecosystem spec read it.
A new stage is a module here (its ``Stage`` and replay) plus its data (snapshots, its
gate and its recorder), and one line below.
"""

from __future__ import annotations

from typing import Any

from specgate.stages.base import Stage, Verdict
from specgate.stages.forward import CONFORMANCE_CLASSES, GENERATE, LOGITS, SAMPLE, TRACE
from specgate.stages.metadata import METADATA
from specgate.stages.render import CONSTRUCTS_SNAPSHOT, RENDER, TEMPLATE
from specgate.stages.state import (
    STATE_BATCH,
    STATE_CHAT,
    STATE_CONVERSATION,
    STATE_GENERATE,
    STATE_INCREMENTAL,
    STATE_REUSE,
)
from specgate.stages.tokenizer import DECODE, ENCODE, SPLIT

__all__ = ["CONFORMANCE_CLASSES", "CONSTRUCTS_SNAPSHOT", "STAGES", "Stage", "Verdict"]

#: Every gate stage, in the matrix's order (the ``gate`` marker's argument is one of these names).
STAGES: dict[str, Stage] = {
    s.name: s
    for s in (METADATA, RENDER, TEMPLATE, SPLIT, ENCODE, DECODE, LOGITS, SAMPLE, GENERATE, TRACE,
              STATE_INCREMENTAL, STATE_CONVERSATION, STATE_REUSE, STATE_GENERATE, STATE_CHAT, STATE_BATCH)
}  # fmt: skip
GATE_STAGES = tuple(STAGES)
#: The stages judged in conformance classes, one matrix row per class.
CLASSED_STAGES = tuple(name for name, s in STAGES.items() if s.classes)
#: The rows a recorded failing case can be replayed and shrunk from (it carries its input).
REPLAYABLE = tuple(row for s in STAGES.values() if s.replay and s.case_input for row in s.rows)
#: The rows a reproducer file can hold: the search also writes sample and generate reproducers.
REPLAYABLE_FILES = tuple(row for s in STAGES.values() if s.replay for row in s.rows)


def known_rows() -> set[str]:
    """What ``--stages`` accepts: every stage, and every ``<stage>/<class>`` row."""
    return {*GATE_STAGES, *(row for s in STAGES.values() for row in s.rows)}


def stage_of(row: str) -> Stage:
    """The stage of a matrix row (``logits/exact`` -> logits)."""
    return STAGES[row.partition("/")[0]]


def replay(row: str, engine: Any, oracle: Any, model: Any, inp: dict[str, Any]) -> Verdict:
    """The gate's comparison for ``row`` on a new input ``inp``, with the oracle's answer
    as the reference; a refusal, an unclaimed class and an engine error are verdicts too."""
    from impl.protocol import EngineError
    from specgate.outcomes.gate import NotApplicable, Refused

    stage, conformance_class = stage_of(row), row.partition("/")[2]
    if stage.replay is None:
        raise KeyError(f"stage {stage.name} cannot be replayed on a new input")
    try:
        return stage.replay(engine, oracle, model, inp, conformance_class)
    except Refused as exc:
        return Verdict("refused", str(exc.msg))
    except NotApplicable as exc:
        return Verdict("n/a", str(exc.msg))
    except EngineError as exc:
        return Verdict("error", str(exc))


def case_input(row: str, case: dict[str, Any], constructs: bool) -> dict[str, Any] | None:
    """The replayable input of a recorded ``case`` of ``row`` (None: not replayable)."""
    if row not in REPLAYABLE:
        return None
    build = stage_of(row).case_input
    return None if build is None else build(case, constructs)
