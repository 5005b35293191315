"""What a gate stage is (``Stage``) and what replaying one input gives (``Verdict``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class Verdict:
    """One input judged against the oracle (``Stage.replay``)."""

    outcome: str  # pass, fail, refused, n/a, reference-disagreement or error
    message: str = ""
    engine_answer: Any = None
    oracle_answer: Any = None


#: ``(engine, oracle, model, input, conformance_class) -> Verdict``: the gate's comparison of
#: one stage on a new input, the oracle's answer standing in for the recorded references.
Replay = Callable[[Any, Any, Any, dict[str, Any], str], Verdict]
#: ``(snapshot case, constructs) -> input``: the replayable input a recorded case carries.
CaseInput = Callable[[dict[str, Any], bool], dict[str, Any]]
#: ``(reference adapters or their answers, ...) -> cases``: how the stage's snapshot cases
#: are built from the references (arguments per stage: ``specgate.stages.<family>_cases``).
Build = Callable[..., dict[str, Any]]


@dataclass(frozen=True)
class Stage:
    """A gate stage: everything the plugin, the gates, triage, the search and the usage
    check know about it.

    ``capability`` is the protocol operation it asks (a name of ``impl.protocol``'s
    capabilities, read as a string); ``classes`` the conformance classes it is judged in
    as separate matrix rows (``<stage>/<class>``), none for a stage judged once;
    ``snapshot`` the snapshot file its cases come from (``snapshots/<model>/<snapshot>.json``);
    ``replay`` and ``case_input`` how a failing case is replayed on a new input and
    shrunk (``specgate.run.triage``; None: it cannot be replayed); ``build`` how its
    snapshot's cases are built from the references (the reference adapters, or their
    answers, are its arguments: ``tests/references`` fetches them, calls it and writes
    the snapshot; it imports no reference library itself)."""

    name: str
    capability: str
    snapshot: str
    classes: tuple[str, ...] = ()
    replay: Replay | None = None
    case_input: CaseInput | None = None
    build: Build | None = None

    @property
    def rows(self) -> tuple[str, ...]:
        """The matrix rows of the stage: ``<stage>/<class>`` per class, else the stage."""
        return tuple(f"{self.name}/{c}" for c in self.classes) or (self.name,)
