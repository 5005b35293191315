"""Root causes, not lists: findings grouped by a normalized signature, and for each
group one minimized reproducer.

An engine with one defect often fails hundreds of cases; its author needs the
defect once, with the smallest input that shows it. So:

* **Grouping.** Every ``fail``, ``error`` and ``reference-disagreement`` record gets a
  signature: its stage, its outcome and the first line of its message with the
  case's own details masked (the model and case ids, quoted text, numbers,
  parenthesized details), and where the first divergence falls when the record kept
  its answers (``specgate.run.signatures``). Records with one signature are one group;
  groups are ordered by size. (Refusals are grouped by their full message in the report.)
* **Shrinking.** A group's first case that the re-check below can replay is shrunk
  against the live engine with delta debugging (``ddmin``): over characters for
  split/encode texts, over token ids for decode, over messages and then the
  characters of each message's content for render conversations, over characters
  for construct templates. A smaller input is kept only when it still diverges with
  the same signature. Shrinking has a time budget per group and in total (checked
  before each engine call: a call already started — one engine timeout at worst —
  finishes).
* **The reference while shrinking.** The recorded references only know the corpus'
  own inputs, and the engine must never judge itself; a shrunk input is judged
  against the oracle, a fast stand-in that agrees with the references on the whole
  corpus (the oracle's own tests). Each reproducer says so: it *diverges from the
  oracle*; the original case was confirmed by the references.

Reproducers are JSON files in ``<report dir>/repro/<report stem>/<group>.json``;
``specgate repro FILE --impl X`` replays one (``replay_file``).
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specgate import stages
from specgate.run import reproducer
from specgate.run.death_groups import join_deaths
from specgate.run.reproducer import ReproError  # noqa: F401
from specgate.run.reproducer import load as load_reproducer  # noqa: F401
from specgate.run.signatures import kind, message_signature, record_signature, signature
from specgate.safe_io import files
from specgate.upkeep.model_ids import model_for
from specgate.upkeep.recorded_cases import RecordedCases

#: The outcomes grouped by root cause (refusals are grouped by message in the report).
GROUPED_OUTCOMES = ("fail", "error", "reference-disagreement")
#: The outcomes a reproducer is shrunk for: divergences of the engine.
SHRUNK_OUTCOMES = ("fail", "error")
#: The rows a re-check can replay on a new input, and those a reproducer file can hold (the
#: differential search also writes sampler and generate reproducers): ``specgate.stages``.
REPLAYABLE, REPLAYABLE_FILES = stages.REPLAYABLE, stages.REPLAYABLE_FILES
#: One input judged against the oracle (``specgate.stages``).
Verdict = stages.Verdict
#: The pseudo model id of sampler reproducers (the sampler stage takes no model).
SAMPLER_MODEL_ID = "sampler"
DEFAULT_GROUP_BUDGET = 20.0  # seconds of shrinking per group
DEFAULT_TOTAL_BUDGET = 120.0  # seconds of shrinking per run
REFERENCE_NOTE = (
    "This input diverges from the oracle (the fast stand-in reference used for shrinking, which agrees "
    "with the recorded references on the whole corpus); the original case was confirmed by the references."
)


# ---------------------------------------------------------------------------
# signatures and groups


@dataclass
class Group:
    """One root cause: the records sharing a signature, and its reproducer if any."""

    signature: str
    records: list[Any]
    reproducer: dict[str, Any] | None = None
    reproducer_path: str | None = None
    shrink_note: str = ""  # why there is no reproducer, when there is none
    diagnosis: str = ""  # the named cause (``specgate.diagnose``), when a hypothesis reproduces the answers
    evidence: str = ""  # how many failing cases the deviated reference reproduces
    localized: str = (
        ""  # the tokenizer step or template construct the engine departs at (``specgate.diagnose.localize``)
    )
    cause: str = ""  # the localized cause several groups shared (``merge_by_cause``): its heading
    sites: list[dict[str, Any]] = field(
        default_factory=list
    )  # where a merged cause shows (``merge_by_cause``)

    @property
    def divergence_signature(self) -> str:
        """What a shrunk input must still show: the group's signature, or for a diagnosed
        group (named by its cause) the message signature of its first case."""
        return message_signature(self.records[0])

    @property
    def id(self) -> str:
        """A file-name-safe, stable name: the stage and a hash of the signature."""
        stage = re.sub(r"[^A-Za-z0-9]+", "_", self.records[0].stage)
        return f"{stage}-{hashlib.sha256(self.signature.encode('utf-8')).hexdigest()[:10]}"

    def as_dict(self) -> dict[str, Any]:
        first = self.records[0]
        return {
            "id": self.id,
            "signature": self.signature,
            "stage": first.stage,
            "outcome": first.outcome,
            "count": len(self.records),
            "models": sorted({r.model for r in self.records}),
            # the first three cases of each place it shows
            "first_cases": list(
                dict.fromkeys(n for site in self.sites or [_site(self)] for n in site["first_cases"])
            ),
            "first_message": first.message,
            "reproducer_file": self.reproducer_path,
            "reproducer": self.reproducer,
            "shrink_note": self.shrink_note,
            "divergence_signature": self.divergence_signature,  # what its reproducer still shows
            "diagnosis": self.diagnosis,
            "evidence": self.evidence,
            "localized": self.localized,
            "where": ""
            if self.diagnosis or self.cause
            else (getattr(first, "answers", None) or {}).get("site", ""),
            "cause": self.cause,
            "stages": sorted({r.stage for r in self.records}),
            # where one cause shows: a row per merged group (stage, outcome, models, cases, site)
            "shows_in": self.sites or [_site(self)],
        }


def _site(group: Group) -> dict[str, Any]:
    """Where a group's cause shows: its stages, outcome, models, case count and divergence site."""
    first = group.records[0]
    return {
        "stages": sorted({r.stage for r in group.records}),
        "outcome": first.outcome,
        "models": sorted({r.model for r in group.records}),
        "count": len(group.records),
        "where": (getattr(first, "answers", None) or {}).get("site", ""),
        "first_cases": [r.nodeid for r in group.records[:3]],
    }


def group_records(records: Sequence[Any], diagnoses: Sequence[Any] = ()) -> list[Group]:
    """The diagnosed causes first (``specgate.diagnose``: one group per named cause of a
    stage — the rows of several models with one cause are one group, each row's evidence
    kept — largest first), then the other grouped outcomes' records by signature, largest
    group first (ties by signature)."""
    causes: dict[str, Group] = {}
    for d in diagnoses:
        heading = f"{d.stage} · fail · the engine {d.cause}"
        if heading in causes:
            causes[heading].records.extend(d.records)
            causes[heading].evidence = f"{causes[heading].evidence}; {d.evidence}"
        else:
            causes[heading] = Group(heading, list(d.records), diagnosis=d.cause, evidence=d.evidence)
    diagnosed = sorted(causes.values(), key=lambda g: -len(g.records))
    explained = {r.nodeid for g in diagnosed for r in g.records}
    groups: dict[str, list[Any]] = {}
    for record in records:
        if record.outcome in GROUPED_OUTCOMES and record.nodeid not in explained:
            groups.setdefault(record_signature(record), []).append(record)
    by_signature = [
        Group(sig, recs) for sig, recs in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    ]
    joined = join_deaths(by_signature, records, _joined)  # a death and the cases it left unasked: one
    return [*diagnosed, *sorted(joined, key=lambda g: -len(g.records))]


def _joined(parts: list[Group]) -> Group:
    """The group of a death and the cases it left unasked (``specgate.run.death_groups``):
    headed by the death, listing where each part shows."""
    head = parts[0]
    return Group(head.signature, [r for g in parts for r in g.records], sites=[_site(g) for g in parts])


def merge_by_cause(groups: list[Group], cause_of: Callable[[str], str]) -> list[Group]:
    """One group per cause: groups that share a diagnosis (across stages, conformance
    classes and models), or a localized cause (``cause_of`` of their ``localized`` line:
    across stages, models and divergence sites) merge into the largest of them. An
    undiagnosed group joins the diagnosed group of its localized cause only when exactly
    one diagnosis has that cause; two diagnoses never merge. The merged group keeps the
    largest's first case (its reproducer's) and lists every place it shows (``sites``);
    groups without a cause stay as they are. Largest first, as ``group_records`` orders."""
    key: dict[int, str] = {}
    by_localized: dict[str, set[str]] = {}  # localized cause -> the diagnoses showing it
    for g in groups:
        cause = cause_of(g.localized) if g.localized and g.records[0].outcome == "fail" else ""
        if g.diagnosis:
            key[id(g)] = f"diagnosis: {g.diagnosis}"
            if cause:
                by_localized.setdefault(cause, set()).add(g.diagnosis)
        elif cause:
            key[id(g)] = f"localized: {cause}"
    for g in groups:  # an undiagnosed group of the localized cause of exactly one diagnosis joins it
        cause = key.get(id(g), "").removeprefix("localized: ")
        if not g.diagnosis and len(named := by_localized.get(cause, set())) == 1 and id(g) in key:
            key[id(g)] = f"diagnosis: {next(iter(named))}"
    merged: dict[str, list[Group]] = {}
    out: list[Group | str] = []
    for g in groups:
        k = key.get(id(g))
        if k is None:
            out.append(g)
        else:
            if k not in merged:
                out.append(k)
            merged.setdefault(k, []).append(g)
    result = []
    for item in out:
        if isinstance(item, Group):
            result.append(item)
            continue
        parts = sorted(merged[item], key=lambda g: (not g.diagnosis, -len(g.records)))
        if len(parts) == 1:
            if item.startswith("localized: "):
                parts[0].cause = item.removeprefix("localized: ")
            result.append(parts[0])
            continue
        head = parts[0]
        result.append(
            Group(
                f"{head.records[0].stage} · cause · {item}",
                [r for g in parts for r in g.records],
                diagnosis=head.diagnosis,
                evidence="; ".join(
                    _evidence(g, cause_of(g.localized)) for g in parts if g.evidence or head.diagnosis
                ),
                localized=head.localized,
                cause="" if head.diagnosis else item.removeprefix("localized: "),
                sites=[s for g in parts for s in (g.sites or [_site(g)])],
            )
        )
    diagnosed = sorted((g for g in result if g.diagnosis), key=lambda g: -len(g.records))
    return [*diagnosed, *sorted((g for g in result if not g.diagnosis), key=lambda g: -len(g.records))]


def _evidence(group: Group, cause: str) -> str:
    """A merged part's evidence: its diagnosis' own, or for an undiagnosed part joining a
    diagnosed cause, how many cases it adds and why (never counted as explained)."""
    if group.evidence:
        return group.evidence
    site = _site(group)
    return (
        f"{site['count']} more failing {', '.join(site['stages'])} case{'s' if site['count'] != 1 else ''} "
        f"of {', '.join(site['models'])} the diagnosis did not explain, localized to the same cause "
        f"({cause})"
    )


# ---------------------------------------------------------------------------
# delta debugging


class OutOfTime(Exception):
    """The shrinking budget ran out; the smallest input found so far stands."""


def ddmin(items: Sequence[Any], still_fails: Callable[[list[Any]], bool]) -> list[Any]:
    """Zeller's delta debugging (ddmin): a 1-minimal sublist of ``items`` for which
    ``still_fails`` holds — removing any single remaining element makes it pass.

    ``items`` itself must fail. The list is cut into ``n`` chunks (first 2): if one
    chunk fails alone it becomes the list (n back to 2); else if the list without
    one chunk (a complement) fails, that becomes the list (n one less); else the
    granularity doubles, until chunks are single elements. The empty list is never
    tried: the smallest answer is one element. Order is kept.

    ``still_fails`` may raise ``OutOfTime``; ``ddmin`` then returns the smallest
    failing list found so far (still failing, not necessarily 1-minimal).
    """
    current = list(items)
    n = 2
    try:
        while len(current) >= 2:
            chunks = _split(current, n)
            for chunk in chunks:
                if still_fails(chunk):
                    current, n = chunk, 2
                    break
            else:
                for i in range(len(chunks)):
                    complement = [x for j, c in enumerate(chunks) if j != i for x in c]
                    if still_fails(complement):
                        current, n = complement, max(n - 1, 2)
                        break
                else:
                    if n >= len(current):
                        break
                    n = min(len(current), 2 * n)
    except OutOfTime:
        pass
    return current


def _split(items: list[Any], n: int) -> list[list[Any]]:
    """``items`` cut into ``n`` contiguous chunks of near-equal size (none empty)."""
    size, extra = divmod(len(items), n)
    chunks, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        chunks.append(items[start:end])
        start = end
    return [c for c in chunks if c]


# ---------------------------------------------------------------------------
# re-checking one input against the oracle, and the inputs of recorded cases


def recheck(stage: str, engine: Any, oracle: Any, model: Any, inp: dict[str, Any]) -> Verdict:
    """The gate's comparison for ``stage`` on a new input ``inp``, with the oracle's
    answer as the reference (the stage's own replay: ``specgate.stages``)."""
    return stages.replay(stage, engine, oracle, model, inp)


def case_input(record: Any, cases: RecordedCases | None = None) -> dict[str, Any] | None:
    """The input of a recorded case: the one its record carries, else read from the
    snapshot it was gated on (``recorded_cases``: the record's snapshot root, never the
    default one by the model's id); None when its stage cannot be replayed."""
    from specgate.upkeep import corpus

    stage, case_id = record.stage, getattr(record, "case", "")
    if stage not in REPLAYABLE or not case_id:
        return None
    if isinstance(getattr(record, "input", None), dict):
        return record.input
    constructs = record.model == corpus.CONSTRUCTS_MODEL_ID
    snapshot = stages.CONSTRUCTS_SNAPSHOT if constructs else stages.stage_of(stage).snapshot
    case = (cases or RecordedCases()).case(record, snapshot)
    return None if case is None else stages.case_input(stage, case, constructs)


def size(inp: dict[str, Any]) -> int:
    """How big an input is, in the units it is shrunk by."""
    if "text" in inp:
        return len(inp["text"])
    if "ids" in inp:
        return len(inp["ids"])
    if "template" in inp:
        return len(inp["template"])
    return len(inp["messages"]) + sum(
        len(m.get("content") or "") for m in inp["messages"] if _text_content(m)
    )


def _text_content(message: Any) -> bool:
    return isinstance(message, dict) and isinstance(message.get("content"), str)


def shrink(inp: dict[str, Any], diverges: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """The smallest variant of ``inp`` found by ``ddmin`` for which ``diverges`` holds."""
    if "text" in inp:
        chars = ddmin(list(inp["text"]), lambda c: diverges({**inp, "text": "".join(c)}))
        return {**inp, "text": "".join(chars)}
    if "ids" in inp:
        return {**inp, "ids": ddmin(inp["ids"], lambda ids: diverges({**inp, "ids": ids}))}
    if "template" in inp:
        chars = ddmin(list(inp["template"]), lambda c: diverges({**inp, "template": "".join(c)}))
        return {**inp, "template": "".join(chars)}
    messages = ddmin(inp["messages"], lambda ms: diverges({**inp, "messages": ms}))
    for i in range(len(messages)):  # then the characters of each message's content
        if _text_content(messages[i]) and messages[i]["content"]:
            messages = _shrink_content(inp, messages, i, diverges)
    return {**inp, "messages": messages}


def _shrink_content(
    inp: dict[str, Any], messages: list[Any], i: int, diverges: Callable[[dict[str, Any]], bool]
) -> list[Any]:
    """``messages`` with message ``i``'s content shrunk by characters."""

    def with_content(chars: list[str]) -> dict[str, Any]:
        edited = [*messages[:i], {**messages[i], "content": "".join(chars)}, *messages[i + 1 :]]
        return {**inp, "messages": edited}

    best = ddmin(list(messages[i]["content"]), lambda c: diverges(with_content(c)))
    return with_content(best)["messages"]


# ---------------------------------------------------------------------------
# shrinking a run's groups


@dataclass
class Shrinker:
    """Shrinks each group's first replayable case against one engine, within budgets."""

    engine: Any
    oracle: Any
    group_budget: float = DEFAULT_GROUP_BUDGET
    total_budget: float = DEFAULT_TOTAL_BUDGET
    clock: Callable[[], float] = time.monotonic
    spent: float = 0.0
    _models: dict[str, Any] = field(default_factory=dict)

    def model(self, model_id: str) -> Any:
        if model_id not in self._models:
            self._models[model_id] = model_for(model_id)
        return self._models[model_id]

    def reproduce(self, group: Group) -> dict[str, Any] | None:
        """The group's reproducer (a JSON-able dict), or None with ``group.shrink_note`` saying why."""
        if group.records[0].outcome not in SHRUNK_OUTCOMES:
            group.shrink_note = f"{group.records[0].outcome} is not a divergence of the engine: not shrunk"
            return None
        remaining = self.total_budget - self.spent
        if remaining <= 0:
            group.shrink_note = f"the run's shrinking budget ({self.total_budget:g} s) is spent"
            return None
        for record in group.records:
            inp = case_input(record)
            if inp is not None:
                break
        else:
            group.shrink_note = f"stage {group.records[0].stage} cannot be replayed on a new input yet"
            return None
        start = self.clock()
        try:
            return self._shrink(group, record, inp, start + min(self.group_budget, remaining))
        finally:
            self.spent += self.clock() - start

    def _shrink(
        self, group: Group, record: Any, inp: dict[str, Any], deadline: float
    ) -> dict[str, Any] | None:
        model = self.model(record.model)
        stage, checks = record.stage, [0]
        seen: dict[str, bool] = {}

        def diverges(candidate: dict[str, Any]) -> bool:
            key = json.dumps(candidate, sort_keys=True, ensure_ascii=False)
            if key not in seen:
                if self.clock() > deadline:
                    raise OutOfTime
                checks[0] += 1
                verdict = recheck(stage, self.engine, self.oracle, model, candidate)
                seen[key] = verdict.outcome == record.outcome and (
                    signature(stage, verdict.outcome, verdict.message) == group.divergence_signature
                )
            return seen[key]

        start = self.clock()
        try:
            original_diverges = diverges(inp)
        except OutOfTime:
            original_diverges = False
        if not original_diverges:
            verdict = recheck(stage, self.engine, self.oracle, model, inp)
            group.shrink_note = (
                f"the original case does not diverge from the oracle with the group's signature "
                f"(against the oracle: {verdict.outcome}: {kind(verdict.message) or 'no message'}): not shrunk"
            )
            return None
        small = shrink(inp, diverges)
        seconds = self.clock() - start
        final = recheck(stage, self.engine, self.oracle, model, small)
        return {
            "group": group.id,
            "signature": group.divergence_signature,
            "stage": stage,
            "model": record.model,
            "original_case": record.nodeid,
            "reference": "oracle",
            "note": REFERENCE_NOTE,
            "input": small,
            "outcome": final.outcome,
            # cut as every reproducer is (``reproducer.bounded_answer``): one ``repro`` replays
            "divergence": reproducer.bounded_answer(final.message),
            "engine_answer": reproducer.bounded_answer(final.engine_answer),
            "oracle_answer": reproducer.bounded_answer(final.oracle_answer),
            "original_input": inp,
            "shrinking": {
                "from_size": size(inp),
                "to_size": size(small),
                "checks": checks[0],
                "seconds": round(seconds, 3),
                "budget_ran_out": self.clock() > deadline,
            },
        }


def examine(
    records: Sequence[Any],
    impl: str,
    repro_dir: Path,
    group_budget: float = DEFAULT_GROUP_BUDGET,
    total_budget: float = DEFAULT_TOTAL_BUDGET,
    diagnose_budget: float = 300.0,
    worth_shrinking: Callable[[list[Group]], list[Group]] = lambda groups: groups,
    engine: Any = None,
    notes: list[str] | None = None,
    fresh_reason: str = "",
) -> list[Group]:
    """A run's findings as root-cause groups: the failing cases diagnosed
    (``specgate.diagnose``; named causes first), the rest grouped by signature, and each
    group's reproducer shrunk — with ``engine`` (the run's own, still running: no second
    load; the caller closes it) or else one fresh engine of ``impl`` for both, closed
    after. ``notes`` gets a line per thing the diagnosis left undone: how many failing
    groups the budget left undiagnosed, and why."""
    from specgate.diagnose.diagnoser import DIAGNOSABLE_ROWS, Diagnoser

    diagnosable = diagnose_budget > 0 and any(
        r.outcome == "fail" and r.stage in DIAGNOSABLE_ROWS for r in records
    )
    shrinkable = total_budget > 0 and any(r.outcome in SHRUNK_OUTCOMES for r in records)
    if not (diagnosable or shrinkable):
        groups = group_records(records)
        shrink_groups(worth_shrinking(groups), impl, repro_dir, group_budget, total_budget)  # notes why not
        return groups
    from impl.registry import resolve

    own = engine is None
    if own and notes is not None:
        notes.append(
            f"the diagnosis and shrinking started the engine again: {fresh_reason or 'no engine to reuse'}"
        )
    engine = resolve(impl) if own else engine
    try:
        try:
            diagnoser = Diagnoser(engine, case_input, model_for, diagnose_budget)
            diagnoses = diagnoser.diagnose(records) if diagnosable else []
        except KeyboardInterrupt:  # Ctrl-C while diagnosing: nothing diagnosed, nothing shrunk
            groups = group_records(records)
            for group in groups:
                group.shrink_note = "the run was interrupted (Ctrl-C) while diagnosing: not shrunk"
            return groups
        groups = group_records(records, diagnoses)
        worth = worth_shrinking(groups)  # not a crash loop's: asked again, the engine only dies again
        if diagnosable:
            from specgate.diagnose.localize import cause_of

            localize_groups(worth, engine)
            groups = merge_by_cause(groups, cause_of)  # one group per cause
            worth = worth_shrinking(groups)
        if notes is not None:
            notes.extend(undiagnosed_notes(groups, diagnoser, DIAGNOSABLE_ROWS))
        shrink_groups(worth, impl, repro_dir, group_budget, total_budget, engine=engine)
    finally:
        if own:
            engine.close()
    return groups


#: Seconds of asking the engine again to localize the tokenizer and render groups (one case each).
LOCALIZE_SECONDS = 60.0
#: The stages whose failures are localized inside the tokenizer or the chat template.
LOCALIZED_STAGES = ("split", "encode", "render")


def localize_groups(groups: list[Group], engine: Any, clock: Callable[[], float] = time.monotonic) -> None:
    """Every failing split, encode or render group, named or not, gets the line of where
    inside the tokenizer (or which construct of the chat template) its first replayable
    case departs (``specgate.diagnose.localize``, ``specgate.diagnose.render_localize``):
    one engine call per group, within ``LOCALIZE_SECONDS``; a group left without it
    says why."""
    from specgate.diagnose.localize import localize_group

    deadline, tokenizers = clock() + LOCALIZE_SECONDS, {}
    for group in groups:
        first = group.records[0]
        if first.outcome != "fail" or first.stage not in LOCALIZED_STAGES:
            continue
        if clock() > deadline:
            group.localized = f"not localized: the {LOCALIZE_SECONDS:g} s of localizing were spent"
            continue
        for record in group.records:
            inp = case_input(record)
            if inp is None:
                continue
            try:
                group.localized = localize_group(engine, record, inp, model_for(record.model), tokenizers)
            except Exception as exc:  # a courtesy: the group stands without it
                group.localized = f"not localized ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})"
            break


def undiagnosed_notes(groups: list[Group], diagnoser: Any, stages_diagnosed: Sequence[str]) -> list[str]:
    """What the diagnosis left undone, for the terminal and every report: how many failing
    groups of diagnosed stages were left undiagnosed because its budget ran out (their
    rows named), then each row it could not examine for another reason."""
    short = set(diagnoser.out_of_time)
    failing = [g for g in groups if g.records[0].outcome == "fail" and g.records[0].stage in stages_diagnosed]
    left = [g for g in failing if not g.diagnosis and any((r.stage, r.model) in short for r in g.records)]
    lines = []
    if short:
        rows = ", ".join(f"{stage} · {model}" for stage, model in diagnoser.out_of_time)
        lines.append(
            f"diagnosis cut short: {len(left)} of {len(failing)} failing group{'s' if len(failing) != 1 else ''} "
            f"left undiagnosed because the diagnosis budget ({diagnoser.budget:g} s, --diagnose-budget) ran out "
            f"before {len(short)} row{'s' if len(short) != 1 else ''} could be examined ({rows}); a larger "
            f"--diagnose-budget names their causes"
        )
    lines += [f"diagnosis: {n}" for n in diagnoser.notes if "not diagnosed, the budget" not in n]
    return lines


def shrink_groups(
    groups: list[Group],
    impl: str,
    repro_dir: Path,
    group_budget: float = DEFAULT_GROUP_BUDGET,
    total_budget: float = DEFAULT_TOTAL_BUDGET,
    engine: Any = None,
) -> None:
    """A reproducer for each group that has a divergence to shrink, written to
    ``repro_dir/<group id>.json`` (the group records its path), against ``engine`` or
    else a fresh engine of ``impl`` started for it and closed after."""
    if total_budget <= 0:
        for g in groups:
            g.shrink_note = "shrinking disabled (--shrink-budget 0)"
        return
    if not any(g.records[0].outcome in SHRUNK_OUTCOMES for g in groups):
        return
    from impl.oracle import OracleEngine
    from impl.registry import resolve

    own = engine is None
    engine = resolve(impl) if own else engine
    try:
        shrinker = Shrinker(engine, OracleEngine(), group_budget, total_budget)
        for group in groups:
            try:
                group.reproducer = shrinker.reproduce(group)
            except KeyboardInterrupt:  # Ctrl-C: no more shrinking; the run's report is still written
                for rest in groups[groups.index(group) :]:
                    rest.shrink_note = "the run was interrupted (Ctrl-C) while shrinking: not shrunk"
                break
            except Exception as exc:  # a reproducer is a courtesy: the run's verdict stands without it
                group.shrink_note = (
                    f"shrinking failed: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
                )
            if group.reproducer is not None:
                path = repro_dir / f"{group.id}.json"
                body = {"impl": impl, **group.reproducer}
                try:  # a full disk: the group is reported without its reproducer, the run goes on
                    repro_dir.mkdir(parents=True, exist_ok=True)
                    files.write_text(path, json.dumps(body, indent=1, ensure_ascii=False, default=str) + "\n")
                except OSError as exc:
                    group.reproducer = None
                    group.shrink_note = f"the reproducer could not be written: {str(exc)[:300]}"
                    continue
                group.reproducer_path = str(path)
    finally:
        if own:
            engine.close()


# ---------------------------------------------------------------------------
# replaying a reproducer (``specgate repro``)


def replay(data: dict[str, Any], engine: Any) -> tuple[Verdict, bool]:
    """The reproducer's input re-checked on ``engine`` against the oracle: the verdict
    and whether it still diverges with the reproducer's signature."""
    from impl.oracle import OracleEngine

    verdict = recheck(data["stage"], engine, OracleEngine(), model_for(data["model"]), data["input"])
    same = signature(data["stage"], verdict.outcome, verdict.message) == data["signature"]
    return verdict, same
