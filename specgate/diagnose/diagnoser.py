"""Diagnosing a run's failing cases.

For each (stage, model) row with failing cases of a stage the catalogue covers:

1. the failing cases are put to the engine again (a fresh engine, within the budget);
2. a hypothesis *explains* a case when the deviated oracle gives exactly the engine's
   answer there and not the reference's; a pair of hypotheses explains it when both
   deviations together do (an engine with two defects);
3. a hypothesis is *contradicted* by a case on which its deviation shows (its answer is
   not the reference's) but the engine's answer is neither its answer nor the answer of
   it with another hypothesis — a passing case on which it shows contradicts it too;
4. a hypothesis that explains at least one case and is contradicted by none is a
   diagnosis. Its group takes the cases it explains alone, greedily (the diagnosis
   explaining the most remaining cases first), so a look-alike keeps only cases nothing
   better explains; the cases only a pair explains form the pair's group. Where another
   diagnosis explains every case of a group too, the group names both: the cases cannot
   tell them apart.

"The engine's answer" is the deviated oracle's exactly for the tokenizer and render
stages; for logits it is the same when it meets the case's conformance class with the
deviated oracle as its reference (a catalogue's ``same``, ``specgate.diagnose.forward``),
and for the state stages when every judged point does and the session held the same
counts (``specgate.diagnose.state``).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from specgate.diagnose import forward, generate, render, sampler, state, tokenizer
from specgate.diagnose.tokenizer import Hypothesis, of_stage
from specgate.outcomes.gate import NotApplicable, ReferenceDisagreement, Refused

#: The catalogue of each stage: a module with ``CATALOGUE``, ``reference`` (the oracle's
#: model), ``answer`` and ``applies`` (the deviated oracle) and ``ask`` (the engine); optionally
#: ``case_input`` (a record's input, where triage's cannot give it) and ``REFERENCE`` (evidence).
CATALOGUES: dict[str, ModuleType] = {
    "split": tokenizer,
    "encode": tokenizer,
    "decode": tokenizer,
    "render": render,
    "logits/exact": forward,
    "logits/quantized": forward,
    "sample": sampler,
    "generate/exact": generate,
    "generate/quantized": generate,
    **{row: state for row in state.STATE_ROWS.split(",")},
}
DIAGNOSABLE_ROWS = tuple(CATALOGUES)


def hypotheses_of(stage: str) -> list[Hypothesis]:
    """The hypotheses that explain failures of ``stage`` (none for a stage not diagnosed)."""
    catalogue = CATALOGUES.get(stage)
    return of_stage(catalogue.CATALOGUE, stage) if catalogue else []


#: What asking the engine raises besides errors: the gate's outcomes (refused, n/a, disagreement).
GATE_OUTCOMES = (Refused, NotApplicable, ReferenceDisagreement)
MAX_CASES_PER_ROW = 200  # failing cases of one (stage, model) put to the engine again
MAX_UNANSWERED = 3  # consecutive cases the engine does not answer before the row is left
#: Seconds of diagnosing per run (an engine call already started finishes). Measured: a
#: four-model tokenizer run (split, encode, decode of the four vocabularies; an engine with
#: NFC and a whitespace-lookahead bug, 275 failing cases) took 99.5 s to diagnose on a
#: 2-core machine at load 4.7 (60 s, the old default, cut it short); 300 s is that with a
#: 3x margin. ``--diagnose-budget`` changes it.
DEFAULT_BUDGET = 300.0


@dataclass
class Diagnosis:
    stage: str
    model: str
    hypotheses: tuple[Hypothesis, ...]  # one, or two whose deviations together explain the cases
    records: list[Any]
    examined: int  # failing cases of the row whose engine answer was compared
    failing: int  # failing cases of the row
    alternatives: tuple[Hypothesis, ...] = ()  # other diagnoses explaining every case of the group too
    measured: str = ""  # what was measured, where the match is within a tolerance (logits)

    @property
    def cause(self) -> str:
        cause = "; and it ".join(h.cause for h in self.hypotheses)
        if self.alternatives:
            cause += " — or, equally (these cases cannot tell them apart), it " + " — or it ".join(
                h.cause for h in self.alternatives
            )
        return cause

    @property
    def name(self) -> str:
        return "+".join(h.name for h in self.hypotheses)

    @property
    def evidence(self) -> str:
        scope = f"{len(self.records)} of {self.failing} failing {self.stage} cases of {self.model}"
        if self.examined < self.failing:
            scope += f" ({self.examined} put to the engine again)"
        oracle = getattr(CATALOGUES.get(self.stage), "REFERENCE", None) or (
            "the oracle's rendering (which agrees with transformers)"
            if self.stage == "render"
            else "the oracle's logits (which agree with transformers)"
            if self.stage.startswith("logits/")
            else "the GGUF pipeline's answer (the oracle, which agrees with the references)"
        )
        measured = f", {self.measured}" if self.measured else ""
        return f"{scope} equal {oracle} when it {self.cause}{measured}"


class OutOfTime(Exception):
    """The diagnosing budget ran out within a row."""


def _equal(stage: str, reference: Any, got: Any) -> bool:
    return bool(reference == got)


@dataclass
class _Case:
    record: Any
    inp: dict[str, Any]
    truth: Any
    got: Any = None  # the engine's answer (failing cases)


@dataclass
class Diagnoser:
    engine: Any
    case_input: Callable[[Any], dict[str, Any] | None]  # a record's input (``triage.case_input``)
    model_for: Callable[[str], Any]  # a model id's ModelRef (``triage.model_for``)
    budget: float = DEFAULT_BUDGET
    clock: Callable[[], float] = time.monotonic
    notes: list[str] = field(default_factory=list)  # why a row was not (wholly) examined
    out_of_time: list[tuple[str, str]] = field(default_factory=list)  # rows the budget left undiagnosed
    _references: dict[tuple[str, str], Any] = field(default_factory=dict)  # per catalogue and model

    def diagnose(self, records: Sequence[Any]) -> list[Diagnosis]:
        """The diagnoses of the failing records, largest first."""
        deadline = self.clock() + self.budget
        rows: dict[tuple[str, str], list[Any]] = {}
        for r in records:
            if r.stage in DIAGNOSABLE_ROWS and r.outcome in ("fail", "pass"):
                rows.setdefault((r.stage, r.model), []).append(r)
        try:
            return self._diagnose_rows(rows, deadline)
        finally:  # the deviated forwards, their answers and the engine's go before the shrinking
            self._references.clear()

    def _diagnose_rows(self, rows: dict[tuple[str, str], list[Any]], deadline: float) -> list[Diagnosis]:
        found: list[Diagnosis] = []
        for (stage, model_id), row in rows.items():
            if not any(r.outcome == "fail" for r in row):
                continue
            if self.clock() > deadline:
                self.out_of_time.append((stage, model_id))
                self.notes.append(
                    f"{stage} · {model_id}: not diagnosed, the budget ({self.budget:g} s) is spent"
                )
                continue
            try:
                found += self._row(stage, model_id, row, deadline)
            except OutOfTime:
                self.out_of_time.append((stage, model_id))
                self.notes.append(
                    f"{stage} · {model_id}: not diagnosed, the budget ({self.budget:g} s) ran out on it"
                )
            except Exception as exc:  # a diagnosis is a courtesy: the verdict stands without it
                self.notes.append(
                    f"{stage} · {model_id}: not diagnosed ({type(exc).__name__}: {str(exc)[:200]})"
                )
        return sorted(found, key=lambda d: (-len(d.records), d.stage, d.model, d.name))

    def _row(self, stage: str, model_id: str, row: list[Any], deadline: float) -> list[Diagnosis]:
        catalogue = CATALOGUES[stage]
        model = self.model_for(model_id)
        key = (catalogue.__name__, model_id)
        if key not in self._references:  # the logits rows of both classes share one model's forwards
            self._references = {key: catalogue.reference(model)}
        m = self._references[key]
        same = getattr(catalogue, "same", _equal)
        case_input = getattr(catalogue, "case_input", self.case_input)  # its own where triage's cannot
        failing_records = [r for r in row if r.outcome == "fail"]
        failing, unanswered = [], 0
        for record in failing_records[:MAX_CASES_PER_ROW]:
            if self.clock() > deadline or unanswered >= MAX_UNANSWERED:
                break
            inp = case_input(record)
            if inp is None:
                continue
            try:
                got = catalogue.ask(self.engine, stage, model, inp)
            except (Exception, *GATE_OUTCOMES):  # refusals, errors, crashes: nothing to explain
                unanswered += 1
                continue
            unanswered = 0
            failing.append(_Case(record, inp, catalogue.answer(stage, m, inp, {}), got))
        if self.clock() > deadline:  # the budget ran out while asking: no diagnosis from a part
            raise OutOfTime
        hyps = hypotheses_of(stage)

        def deviated(case: _Case, *hs: Hypothesis) -> Any:
            knobs = {k: v for h in hs for k, v in h.knobs}
            if not all(catalogue.applies(stage, m, case.inp, dict(h.knobs)) for h in hs):
                return case.truth
            if self.clock() > deadline:
                raise OutOfTime
            return catalogue.answer(stage, m, case.inp, knobs)

        def explains(case: _Case, *hs: Hypothesis) -> bool:
            a = deviated(case, *hs)
            return a is not case.truth and same(stage, a, case.got) and not same(stage, case.truth, a)

        def shows(case: _Case, h: Hypothesis) -> bool:
            a = deviated(case, h)
            return a is not case.truth and not same(stage, case.truth, a)

        alone = {h: {c.record.nodeid for c in failing if explains(c, h)} for h in hyps}
        candidates = [h for h in hyps if alone[h]]
        pairs = {
            (h1, h2): {c.record.nodeid for c in failing if explains(c, h1, h2)}
            for h1, h2 in itertools.combinations(candidates, 2)
            if not {k for k, _ in h1.knobs} & {k for k, _ in h2.knobs}
        }
        passing = [
            _Case(r, inp, None) for r in row if r.outcome == "pass" and (inp := case_input(r)) is not None
        ]
        diagnosed = []
        for h in candidates:
            accounted = alone[h].union(*(ids for pair, ids in pairs.items() if h in pair))
            if any(c.record.nodeid not in accounted for c in failing if shows(c, h)):
                continue
            if self._shows_on_a_passing_case(catalogue, stage, m, h, passing, deadline):
                continue
            diagnosed.append(h)
        found = _groups(stage, model_id, diagnosed, alone, pairs, len(failing), len(failing_records), failing)
        for d in found if hasattr(catalogue, "measured") else ():
            ids = {r.nodeid for r in d.records}
            explained = [c for c in failing if c.record.nodeid in ids]
            try:  # the deviated answers are the ones just compared (kept by the catalogue)
                triples = [(deviated(c, *d.hypotheses), c.got, c.truth) for c in explained]
            except OutOfTime:
                continue  # the diagnosis stands; only its measured distances are not given
            d.measured = catalogue.measured(stage, triples)
        return found

    def _shows_on_a_passing_case(
        self, catalogue: ModuleType, stage: str, m: Any, h: Hypothesis, passing: list[_Case], deadline: float
    ) -> bool:
        for case in passing:
            if self.clock() > deadline:
                return True  # not shown innocent: no diagnosis rather than a guess
            if case.truth is None:
                case.truth = catalogue.answer(stage, m, case.inp, {})
            if catalogue.applies(stage, m, case.inp, dict(h.knobs)) and not getattr(
                catalogue, "same", _equal
            )(stage, case.truth, catalogue.answer(stage, m, case.inp, dict(h.knobs))):
                return True
        return False


def _groups(
    stage: str,
    model: str,
    diagnosed: list[Hypothesis],
    alone: dict[Hypothesis, set[str]],
    pairs: dict[tuple[Hypothesis, Hypothesis], set[str]],
    examined: int,
    failing: int,
    cases: list[_Case],
) -> list[Diagnosis]:
    """Each round, the diagnosis explaining the most cases not yet taken takes them
    (catalogue order at a tie); then the pairs of diagnoses take what only they explain."""
    record = {c.record.nodeid: c.record for c in cases}
    taken: set[str] = set()
    out = []
    while True:
        remaining = {h: alone[h] - taken for h in diagnosed}
        best = max(remaining, key=lambda h: (len(remaining[h]), -diagnosed.index(h)), default=None)
        if best is None or not remaining[best]:
            break
        alternatives = tuple(h for h in diagnosed if h is not best and remaining[best] <= alone[h])
        out.append(
            Diagnosis(
                stage,
                model,
                (best,),
                [record[n] for n in sorted(remaining[best])],
                examined,
                failing,
                alternatives,
            )
        )
        taken |= remaining[best]
    for (h1, h2), ids in pairs.items():
        if h1 in diagnosed and h2 in diagnosed and ids - taken:
            out.append(
                Diagnosis(stage, model, (h1, h2), [record[n] for n in sorted(ids - taken)], examined, failing)
            )
            taken |= ids
    return out
