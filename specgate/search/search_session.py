"""One search session: every requested stage × model searched within its share of
the budget, then each root cause minimized, confirmed by the references, and
written as a reproducer; the report says what was found and by whom it was
confirmed."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specgate.search import reference_confirm as confirming
from specgate.search.searchable import (
    DEFAULT_SEARCHABLE,
    FORWARD_MODELS,
    QUANTIZED_GENERATE,
    QUANTIZED_LOGITS,
    SEARCHABLE,
    size,
)
from specgate.search.stage_search import Candidate, StageRun, search_stage

#: Share of the budget spent searching; the rest minimizes and confirms.
SEARCH_SHARE = 0.65
MINIMIZE_SECONDS = 15.0  # at most, per root cause
MINIMIZE_FLOOR = 3.0  # at least, even past the budget: a reproducer is worth 3 s


class SearchError(Exception):
    """A usage problem (unknown stage or model, an engine that offers nothing to search): one line."""


@dataclass
class Finding:
    candidate: Candidate
    input: dict[str, Any]
    confirmation: confirming.Confirmation
    checks: int
    minimize_seconds: float
    answers: dict[str, Any] = field(default_factory=dict)
    group_id: str = ""
    reproducer_path: str | None = None


@dataclass
class SearchResult:
    impl: str
    seed: int
    budget: float
    runs: list[StageRun] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    references_missing: list[str] = field(default_factory=list)
    seconds: float = 0.0
    given: list[str] = field(default_factory=list)  # known deviations taken as given (``search.given``)
    given_causes: list[str] = field(default_factory=list)  # localized causes taken as given (``GivenCauses``)

    @property
    def explained(self) -> dict[str, int]:
        """Divergences the given causes explained (counted, not findings), by cause."""
        out: dict[str, int] = {}
        for r in self.runs:
            for cause, n in r.explained.items():
                out[cause] = out.get(cause, 0) + n
        return out

    def by_verdict(self, verdict: str) -> list[Finding]:
        return [f for f in self.findings if f.confirmation.verdict == verdict]


def plan(engine: Any, stages: list[str] | None, models: list[str] | None) -> list[tuple[Any, str]]:
    """(stage, model id) pairs to search: the stages the engine offers, each on the
    given models (``--models``) or its default models."""
    names = stages or list(DEFAULT_SEARCHABLE)
    unknown = [s for s in names if s not in SEARCHABLE]
    if unknown:
        raise SearchError(f"unknown stage(s) {unknown}; searchable stages: {', '.join(SEARCHABLE)}")
    pairs = []
    for name in names:
        stage = SEARCHABLE[name]
        if name in ("logits", "generate") and "exact" not in engine.classes:
            stage = QUANTIZED_LOGITS if name == "logits" else QUANTIZED_GENERATE
        if not engine.offers(stage.capability):
            continue
        chosen = _models_for(stage, models or [])
        pairs.extend((stage, m) for m in chosen)
    if not pairs:
        raise SearchError(f"{engine.name} offers none of the stages {names}")
    return pairs


def _models_for(stage: Any, models: list[str]) -> list[str]:
    """The ``--models`` a stage runs on: all of them for the tokenizer and render stages, the
    tiny ones for the forward stage (a forward pass per example); the stage's own otherwise."""
    if stage.default_models[0] in ("constructs", "sampler"):
        return list(stage.default_models)
    if stage.default_models == FORWARD_MODELS:
        return [m for m in models if m.startswith("tiny-")] or list(FORWARD_MODELS)
    return models or list(stage.default_models)


def model_ref(model_id: str) -> Any:
    from specgate.run import triage

    return triage.model_for(model_id)


def run_search(
    engine: Any,
    impl: str,
    *,
    stages: list[str] | None = None,
    models: list[str] | None = None,
    budget: float = 600.0,
    seed: int = 0,
    database: Path | None = None,
    oracle: Any = None,
    references: confirming.References | None = None,
    max_rss_mb: float = 6000.0,
    log: Callable[[str], None] = lambda line: None,
    clock: Callable[[], float] = time.monotonic,
    given: list[str] | None = None,
    given_causes: list[str] | None = None,
) -> SearchResult:
    """Search ``engine`` against ``oracle`` (the live oracle by default; a test passes
    another) and confirm what diverges on ``references``. ``given``: known deviations
    (tokenizer catalogue names, ``specgate.search.given``) the search's reference takes
    on, so that it finds what they do not explain; the references still judge against
    the spec'd ``oracle``. ``given_causes``: localized causes (``GivenCauses``) whose
    split/encode divergences are counted as explained, not kept."""
    from impl.oracle import OracleEngine

    oracle = oracle if oracle is not None else OracleEngine()
    refs = references if references is not None else confirming.References()
    start = clock()
    pairs = plan(engine, stages, models)
    result = SearchResult(impl, seed, budget, given=list(given or []))
    searched = oracle
    causes = None
    if given_causes:
        from specgate.search.given import CAUSE_STAGES, GivenCauses, UnknownGiven

        try:
            causes = GivenCauses(given_causes)
        except UnknownGiven as exc:
            raise SearchError(str(exc)) from None
        result.given_causes = causes.causes
        others = sorted({s.name for s, _ in pairs if s.gate_stage not in CAUSE_STAGES})
        if others:
            log(
                f"--given-cause applies to {', '.join(CAUSE_STAGES)}; {', '.join(others)} searched without it"
            )
    if given:
        from specgate.search.given import GIVEN_STAGES, GivenOracle, UnknownGiven

        try:
            searched = GivenOracle(given)
        except UnknownGiven as exc:
            raise SearchError(str(exc)) from None
        others = sorted({s.name for s, _ in pairs if s.gate_stage not in GIVEN_STAGES})
        if others:
            log(
                f"--given applies to {', '.join(GIVEN_STAGES)}; {', '.join(others)} searched against the oracle"
            )
    search_end = start + SEARCH_SHARE * budget
    for k, (stage, model_id) in enumerate(pairs):
        try:
            model = model_ref(model_id)
        except Exception as exc:
            result.skipped.append(f"{stage.name} on {model_id}: {str(exc).splitlines()[0]}")
            continue
        share = (search_end - clock()) / (len(pairs) - k)
        log(f"searching {stage.name} on {model_id} for {share:.0f} s")
        reference = searched if stage.gate_stage in ("split", "encode", "decode") else oracle
        run = search_stage(
            stage, model_id, model, engine, reference,
            seed=seed, deadline=clock() + share, database=database, max_rss_mb=max_rss_mb, clock=clock,
            given_causes=causes,
        )  # fmt: skip
        explained = sum(run.explained.values())
        log(
            f"  {run.examples} examples, {len(run.candidates)} divergence(s) from the oracle"
            + (f", {explained} explained by the given cause(s)" if causes is not None else "")
        )
        result.runs.append(run)
        explains = None if causes is None else functools.partial(causes.explains, stage.gate_stage, model)
        for candidate in run.candidates.values():
            result.findings.append(
                _settle(
                    stage, model, candidate, engine, reference, refs, start + budget, clock, oracle, explains
                )
            )
            log(f"  {result.findings[-1].confirmation.verdict}: {candidate.signature}")
    result.references_missing = sorted(
        {
            why
            for f in result.findings
            for why in f.confirmation.judges.values()
            if why.startswith("unavailable")
        }
    )
    result.seconds = round(clock() - start, 3)
    return result


def _settle(
    stage: Any,
    model: Any,
    candidate: Candidate,
    engine: Any,
    oracle: Any,
    refs: Any,
    end: float,
    clock: Any,
    spec_oracle: Any = None,
    explained: Any = None,
) -> Finding:
    """Minimize one candidate against ``oracle`` (the search's reference), then have the
    references judge the minimized input against ``spec_oracle`` (the spec'd oracle, when
    the search's reference took deviations as given)."""
    from specgate.run.triage import recheck
    from specgate.search.minimize import minimize

    began = clock()
    budget = max(MINIMIZE_FLOOR, min(MINIMIZE_SECONDS, end - began))
    small, checks = minimize(
        stage, model, candidate.input, candidate.signature, engine, oracle, budget, clock, explained
    )
    seconds = round(clock() - began, 3)
    confirmation = confirming.confirm(stage, model, small, engine, spec_oracle or oracle, refs)
    verdict = recheck(stage.gate_stage, engine, oracle, model, small)
    answers = {"engine": verdict.engine_answer, "oracle": verdict.oracle_answer, "message": verdict.message}
    return Finding(candidate, small, confirmation, checks, seconds, answers)


__all__ = ["Finding", "SearchError", "SearchResult", "plan", "run_search", "size"]
