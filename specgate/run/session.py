"""The session of one pytest run of specgate (``SpecgateSession``): its options, its
gate records, the engine's answers (``AnswerCache``), the models and snapshots it has
loaded. It lives in ``config.stash[SESSION]`` and is reached by the ``specgate``
fixture or from the config; there is no module-level copy.

``setup_missing`` needs no session: it raises a skip carrying its remedy, and the plugin's
report hook, which has the session, decides — a skip in a partial local run, a failure under
``--live-references``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from impl.protocol import Engine, ModelRef
from specgate.outcomes.gate import NotApplicable, Refused
from specgate.outcomes.verdict import GateRecord
from specgate.run import crashloop
from specgate.supply import models as model_cache
from specgate.upkeep import snapshots


class AnswerCache:
    """The engine's answers, computed once per (operation, model, input) however
    many gates read them. Gates run case by case, so the few newest answers are
    enough; large ones (a prompt's logits) are not kept longer than that. A refusal
    is remembered like an answer; a crash or a hang is not — the next case asks
    again, so one crash costs one case."""

    def __init__(self, size: int = 4) -> None:
        self.size = size
        self._answers: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
        self.computed = 0  # how many answers were computed (for tests of the sharing)

    def get(self, key: tuple[Any, ...], compute: Callable[[], Any]) -> Any:
        if key in self._answers:
            self._answers.move_to_end(key)
            value = self._answers[key]
        else:
            self.computed += 1
            try:
                value = compute()
            except (Refused, NotApplicable) as exc:  # a refusal is an answer too: not asked twice
                value = _Raised(exc)
            self._answers[key] = value
            while len(self._answers) > self.size:
                self._answers.popitem(last=False)
        if isinstance(value, _Raised):
            raise value.exc
        return value


@dataclass
class _Raised:
    exc: BaseException


@dataclass
class SpecgateSession:
    """Everything one pytest run of specgate holds: the options, the gate records and
    the engine's answers. Kept in ``config.stash``; reached by the ``specgate``
    fixture."""

    impl: str
    strict: bool = False
    live_references: bool = False
    records: list[GateRecord] = field(default_factory=list)
    answers: AnswerCache = field(default_factory=AnswerCache)
    verdict: list[str] = field(default_factory=list)  # why the run fails beyond per-case failures
    groups: list[Any] | None = None  # root-cause groups with reproducers (specgate.run.triage), after the run
    snapshot_root: Any = None  # the run's snapshot directory (``snapshots.root_of``), set at configure
    shard: tuple[int, int] | None = None  # --shard I/N: (I, N)
    report_name: str = ""  # --report-name: the report stem's source instead of the impl string
    models: dict[str, ModelRef] = field(default_factory=dict)  # --model spec or user GGUF id -> ModelRef
    references: dict[str, Engine] = field(default_factory=dict)  # live reference adapters, loaded once
    weights_model: str | None = None  # the model whose forward weights the gates hold now
    snapshots: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)  # (model, stage) -> cases
    setup_problems: list[str] = field(default_factory=list)  # unreadable snapshots met while parametrizing
    setup_error: str = ""  # a pytest-xdist worker's setup problem, reported by the controller
    crash_loops: crashloop.CrashLoops = field(default_factory=crashloop.CrashLoops)  # engine deaths
    engine_info: dict[str, Any] | None = None  # the engine's self-description (specgate.run.provenance)
    startup_failure: str = ""  # the one-line reason the engine did not start
    engine: Engine | None = None  # the gate's engine, kept running for the diagnosis and shrinking
    diagnosis_notes: list[str] = field(default_factory=list)  # what the diagnosis left undone, and why
    provenance: dict[str, Any] | None = (
        None  # the reports' provenance (specgate.run.provenance.run), at the end
    )

    def snapshot_cases(self, model: ModelRef, stage: str) -> dict[str, Any]:
        """A stage snapshot's cases, loaded and provenance-checked once per session.
        A stale snapshot (model sha256 changed) fails loudly. The construct templates'
        pseudo model's snapshot is always the repository's."""
        key = (model.id, stage)
        if key not in self.snapshots:
            root = snapshots.SNAPSHOT_ROOT if model.role == "corpus" else self.snapshot_root
            try:
                self.snapshots[key] = snapshots.load(model, stage, root)
            except snapshots.SnapshotError as exc:
                pytest.fail(str(exc), pytrace=False)
        return self.snapshots[key]

    def model(self, spec: str) -> ModelRef:
        """A cached ``ModelRef`` per --model spec (hashing a user GGUF happens once). A user
        GGUF is then also found by its id, which the gates are parametrized with."""
        if spec not in self.models:
            ref = model_cache.model_ref(spec)
            if ref.role == "user":
                register_user_model(self.models, spec, ref)
            self.models[spec] = ref
        return self.models[spec]


def register_user_model(refs: dict[str, ModelRef], spec: str, ref: ModelRef) -> None:
    """Make ``ref.id`` (the GGUF's file stem) name the user's GGUF for the rest of the
    run; an id that already names another model would make the snapshots ambiguous."""
    taken = refs.get(ref.id)
    if taken is not None and taken.gguf != ref.gguf:
        raise model_cache.ModelError(
            f"its id {ref.id!r} (the file name without .gguf) already names {taken.gguf}; rename one of the files"
        )
    if taken is None and model_cache.is_known_id(ref.id):
        raise model_cache.ModelError(
            f"its id {ref.id!r} (the file name without .gguf) is also a manifest or tiny model id, "
            "whose snapshots would be taken for its own; rename the file"
        )
    refs[ref.id] = ref


SESSION = pytest.StashKey[SpecgateSession]()


#: The attribute a ``setup_missing`` skip carries: its remedy (a plain skip otherwise, so a
#: partial local run shows it as any other skip).
REMEDY = "specgate_setup_remedy"


def setup_missing(reason: str, remedy: str = "") -> None:
    """Something a test needs is missing (a cached model, a reference library, an installed
    third-party engine). Under ``--live-references`` (``nox -s tests`` and ``live``, which
    install and fetch all of it first) that is a broken setup: the test fails, naming
    ``remedy`` (``missing_is_failure``, called by the plugin's report hook, which has the
    session). Otherwise (a partial local run) it is skipped, saying what is missing."""
    skip = pytest.skip.Exception(reason)
    setattr(skip, REMEDY, remedy)
    raise skip


def model_missing(reason: str) -> None:
    """A test's model is not in the cache (``reason`` names the command that provides it)."""
    setup_missing(f"model missing from the cache: {reason}")


def missing_is_failure(session: SpecgateSession | None, report: pytest.TestReport, exc: Any) -> None:
    """Under ``--live-references`` a ``setup_missing`` skip fails its test."""
    if session is None or not session.live_references or not report.skipped or not hasattr(exc, REMEDY):
        return
    remedy = getattr(exc, REMEDY)
    report.outcome = "failed"
    report.longrepr = f"{exc.msg} ({remedy})" if remedy else str(exc.msg)
