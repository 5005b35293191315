"""The search loop: hypothesis generates inputs for one stage, each runs through the
engine and the live oracle side by side (the gate's comparison,
``specgate.run.triage.recheck``), and every divergence's smallest input is kept per
root cause (the triage signature).

* **Rounds.** A stage's time is spent in rounds of ``EXAMPLES_PER_ROUND`` examples,
  round ``k`` seeded with ``(seed, stage, model, k)``: the same seed generates the
  same inputs in the same order, the budget only decides how far the search gets.
* **Shrinking.** A new signature's failure is shrunk by hypothesis in the round it is
  found (each signature raises its own exception class, so hypothesis shrinks each
  root cause separately), within ``shrink_share`` of the stage's time; later rounds
  treat known signatures as passing and keep exploring. Triage's ``ddmin`` then
  shrinks the smallest input further (``specgate.search.minimize``).
* **Resuming.** Failing examples are saved in hypothesis' example database (a
  directory); the first round of a later run replays them first.
* **Bounds.** Wall time (``deadline``), and the resident memory the search adds to
  its process (measured from the stage's start, so a search run inside a large test
  process is bounded by what it adds): past ``max_rss_mb`` the stage stops, saying so.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

EXAMPLES_PER_ROUND = 60
#: Per signature: at most this many distinct variants (by shape), found in at most
#: ``VARIANT_TRIES`` quick minimizations of ``VARIANT_SECONDS`` each.
MAX_VARIANTS = 4
VARIANT_TRIES = 12
VARIANT_SECONDS = 3.0
#: A stage whose first this many inputs are all refused is not searched further.
REFUSAL_PROBE = 40


def input_shape(inp: dict[str, Any], id_kind: Callable[[int], str] | None = None) -> str:
    """The shape of a minimized input that tells variants of one signature apart: a
    construct template's own text (the construct is the root cause), the message fields
    and keyword arguments a conversation needs, token ids by ``id_kind`` (what the
    oracle decodes them to: partial UTF-8, nothing, text), otherwise ``shape_of``."""
    if "ids" in inp and id_kind is not None:
        return " ".join(id_kind(i) for i in inp["ids"])
    if "template" in inp:
        return inp["template"]
    if "prompt" in inp:
        from specgate.search.generation import shape

        return shape(inp)
    if "messages" in inp:
        fields = sorted({k for m in inp["messages"] if isinstance(m, dict) for k in m if k != "role"})
        return f"fields={'+'.join(fields)} kwargs={'+'.join(sorted(inp.get('kwargs', {})))}"
    return shape_of(inp)


def token_kinds(oracle: Any, model: Any) -> Callable[[int], str]:
    """``id_kind`` for ``input_shape``: a token id as the kind of bytes the oracle decodes it to."""

    def kind(token: int) -> str:
        try:
            data = oracle.decode(model, [token])
        except Exception:
            return "undecodable"
        if not data:
            return "empty"
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return "partial-utf8"
        return shape_of(text) if not (text.startswith("<") or text.startswith("[")) else "marker"

    return kind


def shape_of(value: Any) -> str:
    """An input's shape: strings as their runs of Unicode major categories (letter,
    number, separator, punctuation, symbol, mark, other), numbers
    as ``#``, lists and mappings kept. One signature (one message form) can hide
    several defects — an engine that glues ``Ⅸ`` to a space and one that mishandles
    ideographic spaces both give "ids differ"; their minimized inputs differ in shape."""
    import unicodedata

    if isinstance(value, str):
        runs: list[str] = []
        for ch in value:
            cat = unicodedata.category(ch)[0]
            if not runs or runs[-1] != cat:
                runs.append(cat)
        return "'" + ".".join(runs) + "'"
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, (int, float)):
        return "#"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{shape_of(v)}" for k, v in sorted(value.items())) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(shape_of(v) for v in value) + "]"
    return type(value).__name__


@dataclass
class Candidate:
    """The smallest input found for one signature (a root cause) of one stage and model."""

    stage: str
    model: str
    signature: str
    outcome: str
    message: str
    input: dict[str, Any]
    first_input: dict[str, Any]
    found_after: int  # examples run before it was first seen
    hits: int = 1
    shape: str = ""  # the minimized input's shape (``shape_of``): variants of one signature differ in it


@dataclass
class StageRun:
    stage: str
    model: str
    examples: int = 0
    answered: int = 0  # examples the engine answered (pass or fail): not refused, n/a or an error
    seconds: float = 0.0
    rounds: int = 0
    candidates: dict[str, Candidate] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    oracle_errors: list[dict[str, Any]] = field(default_factory=list)
    #: divergences a given localized cause explains (``search.given.GivenCauses``), by cause:
    #: counted, never candidates
    explained: dict[str, int] = field(default_factory=dict)


def _rss_mb() -> float:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _key(inp: dict[str, Any]) -> str:
    return json.dumps(inp, sort_keys=True, ensure_ascii=False, default=repr)


class Divergence(Exception):
    """Raised inside the hypothesis test: one subclass per signature (see module docstring)."""


_divergence_classes: dict[str, type[Divergence]] = {}


def _divergence(signature: str) -> type[Divergence]:
    if signature not in _divergence_classes:
        name = "Divergence_" + hashlib.sha256(signature.encode()).hexdigest()[:10]
        _divergence_classes[signature] = type(name, (Divergence,), {})
    return _divergence_classes[signature]


def search_stage(
    stage: Any,
    model_id: str,
    model: Any,
    engine: Any,
    oracle: Any,
    *,
    seed: int,
    deadline: float,
    database: Path | None,
    shrink_share: float = 0.3,
    max_rss_mb: float = 6000.0,
    clock: Callable[[], float] = time.monotonic,
    given_causes: Any = None,
) -> StageRun:
    """Search one stage on one model until ``deadline`` (a ``clock`` time): ``StageSearch``."""
    search = StageSearch(
        stage, model_id, model, engine, oracle, deadline=deadline, shrink_share=shrink_share,
        max_rss_mb=max_rss_mb, clock=clock, given_causes=given_causes,
    )  # fmt: skip
    return search.run(seed, database)


class StageSearch:
    """One stage searched on one model: rounds of hypothesis examples (``run``), each
    input put to the engine and the oracle (``probe``); a new signature's first input
    shrunk within ``shrink_share`` of the time and ``settle``d, later inputs of a settled
    signature kept as variants when their shape is new (``maybe_variant``). With
    ``given_causes`` (``search.given.GivenCauses``), a divergence localized to a given cause
    is counted as explained and passes: it is no candidate, no variant, and no smaller
    input of a candidate (``minimized``)."""

    def __init__(
        self,
        stage: Any,
        model_id: str,
        model: Any,
        engine: Any,
        oracle: Any,
        *,
        deadline: float,
        shrink_share: float = 0.3,
        max_rss_mb: float = 6000.0,
        clock: Callable[[], float] = time.monotonic,
        given_causes: Any = None,
    ) -> None:
        self.stage, self.model_id, self.model = stage, model_id, model
        self.given_causes = given_causes
        self.engine, self.oracle = engine, oracle
        self.deadline, self.shrink_share, self.max_rss_mb, self.clock = (
            deadline,
            shrink_share,
            max_rss_mb,
            clock,
        )
        self.result = StageRun(stage.name, model_id)
        self.start = clock()
        self.resident_before = _rss_mb()  # the bound is on what the search adds, not on its host process
        self.strategy = stage.inputs(model, oracle)
        self.settled: set[str] = set()  # signatures shrunk in an earlier round: passing from then on
        self.shapes: dict[str, set[str]] = {}  # signature -> the shapes of its variants found
        self.tries: dict[str, int] = {}
        self.outcomes: dict[str, int] = {}
        self.id_kind = (
            token_kinds(oracle, model)
            if stage.gate_stage in ("decode", "logits/exact", "logits/quantized")
            else None
        )
        self.shrink_until = deadline
        self.stopped = ""

    def minimized(self, inp: dict[str, Any], sig: str) -> dict[str, Any]:
        """``inp`` shrunk by triage's ddmin for at most ``VARIANT_SECONDS`` of what time is left."""
        from specgate.search.minimize import minimize

        budget = min(VARIANT_SECONDS, max(0.0, self.deadline - self.clock()))
        if not budget:
            return inp
        return minimize(
            self.stage, self.model, inp, sig, self.engine, self.oracle, budget, self.clock, self.explained
        )[0]

    def explained(self, inp: dict[str, Any], verdict: Any) -> str:
        """The given cause a divergence is localized to (``""``: none, or no cause given)."""
        if self.given_causes is None:
            return ""
        return self.given_causes.explains(self.stage.gate_stage, self.model, inp, verdict)

    def settle(self, sig: str) -> None:
        """A signature's first candidate, minimized, gives the first known shape."""
        candidate = self.result.candidates[sig]
        candidate.input = self.minimized(candidate.input, sig)
        candidate.shape = input_shape(candidate.input, self.id_kind)
        self.shapes[sig] = {candidate.shape}
        self.settled.add(sig)

    def maybe_variant(self, sig: str, inp: dict[str, Any], verdict: Any) -> None:
        """A settled signature's new failing input, minimized: a new variant if its shape is new."""
        if len(self.shapes[sig]) >= MAX_VARIANTS or self.tries.get(sig, 0) >= VARIANT_TRIES:
            return
        if self.stage.name == "generate":  # its prompts are the corpus's: one reproducer per signature
            return
        self.tries[sig] = self.tries.get(sig, 0) + 1
        small = self.minimized(inp, sig)
        shape = input_shape(small, self.id_kind)
        if shape not in self.shapes[sig]:
            self.shapes[sig].add(shape)
            self.result.candidates[f"{sig} ¦ {shape}"] = Candidate(
                self.stage.name,
                self.model_id,
                sig,
                verdict.outcome,
                verdict.message,
                small,
                inp,
                self.result.examples,
                shape=shape,
            )

    def probe(self, inp: dict[str, Any]) -> None:
        """One generated input through the engine and the oracle; a divergence of a new
        signature is recorded and raised (one exception class per signature)."""
        from specgate.run.triage import recheck, signature

        run, now = self.result, self.clock()
        if now > self.deadline or now > self.shrink_until or self.stopped:
            return
        run.examples += 1
        if run.examples % 50 == 0 and _rss_mb() - self.resident_before > self.max_rss_mb:
            self.stopped = f"stopped: the search's resident memory grew by more than {self.max_rss_mb:g} MB"
            return
        try:
            verdict = recheck(self.stage.gate_stage, self.engine, self.oracle, self.model, inp)
        except Exception as exc:  # the oracle itself failed on this input: loud, never the engine's
            if len(run.oracle_errors) < 20:
                run.oracle_errors.append({"input": inp, "error": f"{type(exc).__name__}: {exc}"[:500]})
            return
        self.outcomes[verdict.outcome] = self.outcomes.get(verdict.outcome, 0) + 1
        run.answered += verdict.outcome in ("pass", "fail")
        if run.examples == REFUSAL_PROBE and set(self.outcomes) <= {"refused", "n/a"}:
            self.stopped = (
                f"stopped: the engine refused or could not take all of the first {REFUSAL_PROBE} inputs"
            )
        if verdict.outcome not in ("fail", "error"):
            return
        if cause := self.explained(inp, verdict):  # a given cause's case: counted, then passing
            run.explained[cause] = run.explained.get(cause, 0) + 1
            return
        sig = signature(self.stage.gate_stage, verdict.outcome, verdict.message)
        if sig in self.settled:
            run.candidates[sig].hits += 1
            self.maybe_variant(sig, inp, verdict)
            return
        self.record(sig, inp, verdict, now)
        raise _divergence(sig)(sig)

    def record(self, sig: str, inp: dict[str, Any], verdict: Any, now: float) -> None:
        """A divergence of a signature not yet settled: its first candidate (which opens
        the shrink window), or a smaller input for the candidate it has."""
        from specgate.search.searchable import size

        run = self.result
        known = run.candidates.get(sig)
        if known is None:
            run.candidates[sig] = Candidate(
                self.stage.name, self.model_id, sig, verdict.outcome, verdict.message, inp, inp, run.examples
            )
            self.shrink_until = min(self.deadline, now + self.shrink_share * (self.deadline - self.start))
            return
        known.hits += 1
        if (size(inp), len(_key(inp))) < (size(known.input), len(_key(known.input))):
            known.input, known.message = inp, verdict.message

    def run(self, seed: int, database: Path | None) -> StageRun:
        """Rounds until the deadline or a stop, each seeded with ``(seed, stage, model, k)``;
        failing examples saved in (and first replayed from) the example ``database``."""
        from hypothesis.database import DirectoryBasedExampleDatabase

        db = DirectoryBasedExampleDatabase(str(database)) if database is not None else None
        key = f"{seed}/{self.stage.name}/{self.model_id}".encode()
        base = int.from_bytes(hashlib.sha256(key).digest()[:4], "big")
        run = self.result
        while self.clock() < self.deadline and not self.stopped:
            self.round(base + run.rounds, db)
            for sig in [k for k in run.candidates if k not in self.settled and " ¦ " not in k]:
                self.settle(sig)
            run.rounds += 1
        if self.stopped:
            run.notes.append(self.stopped)
        run.seconds = round(self.clock() - self.start, 3)
        return run

    def round(self, round_seed: int, db: Any) -> None:
        """One round of ``EXAMPLES_PER_ROUND`` examples (the first replays the database)."""
        from hypothesis import HealthCheck, Phase, given, settings
        from hypothesis import seed as hypothesis_seed

        run = self.result
        phases = [Phase.generate, Phase.shrink]
        if run.rounds == 0:
            phases.insert(0, Phase.reuse)
        config = settings(
            max_examples=EXAMPLES_PER_ROUND,
            deadline=None,
            database=db,
            phases=phases,
            suppress_health_check=list(HealthCheck),
            report_multiple_bugs=True,
            derandomize=False,
            print_blob=False,
            verbosity=settings.default.verbosity,
        )
        test = config(hypothesis_seed(round_seed)(given(self.strategy)(self.probe)))
        test._hypothesis_internal_database_key = f"specgate-search/{self.stage.name}/{self.model_id}".encode()
        self.shrink_until = self.deadline
        try:
            test()
        except Exception as exc:  # the round found divergences (or its shrink was cut short): recorded above
            if not isinstance(exc, Divergence) and not _is_hypothesis_report(exc):
                run.notes.append(
                    f"round {run.rounds}: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                )


def _is_hypothesis_report(exc: BaseException) -> bool:
    """Whether ``exc`` is how hypothesis ends a round that found divergences: one of
    them, a group of them, or a flakiness report (a shrink cut short by the deadline)."""
    if isinstance(exc, Divergence):
        return True
    inner = getattr(exc, "exceptions", None)
    if inner is not None:
        return all(_is_hypothesis_report(e) for e in inner)
    return type(exc).__module__.startswith("hypothesis")
