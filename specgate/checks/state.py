"""The state stages' comparison: an engine's session (PROTOCOL.md 4.7) driven through a
case, and its last-position logits held to a fresh one-shot prefill in the logits
stage's conformance classes (``specgate.checks.logits``: the same check, tolerances and
metrics, on the one judged position).

* ``play_incremental``: a new session, the prompt appended chunk by chunk; after each
  append the session must hold the tokens appended so far (a new session holds nothing).
* ``play_conversation``: a new session, per turn the KV the new render no longer holds
  truncated (``keep``: a template drift, a seam) and only the rest appended; the session
  must then hold the whole render, and its logits are judged per turn.
* ``play_batch``: the case's prompts in one ``batch_logits`` request; each row is judged
  against that prompt's one-shot prefill alone.
* ``play_chat``: a new conversation (``conversation_*``: the engine renders and caches
  itself), per turn the messages sent; the ids its cache then holds must be the whole
  render's tokenization (``held_ids`` names a seam or a drift kept), its logits are
  judged per turn.
* ``play_reuse``: the case's steps on two sessions (open, append a span of the session's
  ids, close); after each append the session must hold the span's end, and at each
  judged point its logits are judged against a fresh prefill of what it holds.

A judged row is the full array or, from an engine that names only some candidates
(``impl.named_logprobs``: llama-cpp-python's server names its top-k by text), the named
log-probabilities of that one position, judged as the logits stage judges them
(``specgate.checks.logit_named``: a KL lower bound over the reference's top-k ids it names
and one "rest"; nothing claimed about the ids it does not name).

Playing is class-free (the engine is asked once per case, whichever classes read the
answer); ``judge_*`` judges one class. A session the engine holds wrongly (a count
off after an append or a truncate) fails every class, the logits' distance named too.

The classes' bounds are the logits stage's, and on these stages they are measured, not
assumed: played incrementally on their own KV caches, transformers' rows stay within
float32 rounding of its one-shot rows (≤ 1.9e-5) and llama.cpp's within mean KL 2.4e-3
of its own (the 0.5B model; README's state table, ``specgate.stages.state_references``).
``judge_record`` judges two recorded rows of a point against each other the same way.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from impl.named_logprobs import NamedLogprobs
from impl.protocol import EngineError
from specgate.checks import logit_metrics, logit_named, logits
from specgate.outcomes.gate import call, claims, fail_if, refused, report_metrics


@dataclass
class Played:
    """What the engine answered across one case: the last logits row per judged point
    (the prompt's end; each turn), and what it held wrongly on the way (per point)."""

    rows: list[np.ndarray | NamedLogprobs] = field(default_factory=list)
    held: list[str | None] = field(default_factory=list)
    ids: list[list[int]] = field(default_factory=list)  # per turn, the ids a chat engine's cache holds


def _append(engine: Any, session: str, ids: list[int]) -> tuple[int, np.ndarray | NamedLogprobs]:
    answer = call(engine, "session", session, ids, method="session_append")
    got = answer["logits"]
    row = got if isinstance(got, NamedLogprobs) else np.asarray(got, dtype=np.float32).reshape(-1)
    return int(answer["n_past"]), row


def _session(engine: Any, model: Any) -> str:
    return str(call(engine, "session", model, method="session_open"))


def _close(engine: Any, session: str) -> None:
    with contextlib.suppress(Exception):  # the verdict is the answers'; a failing close is not judged
        call(engine, "session", session, method="session_close")


def play_incremental(engine: Any, model: Any, case: dict[str, Any]) -> Played:
    """The prompt appended in ``case["chunks"]`` to a new session: the last row, and the
    first chunk after which the session did not hold the tokens appended so far."""
    ids, played, problem, at = case["ids"], Played(), None, 0
    session = _session(engine, model)
    try:
        for k, size in enumerate(case["chunks"]):
            n_past, row = _append(engine, session, ids[at : at + size])
            at += size
            if problem is None and n_past != at:
                before = n_past - size
                problem = (
                    f"the new session held {before} tokens before its first append (KV of an earlier "
                    f"session kept?)"
                    if k == 0
                    else f"after chunk {k + 1} (tokens {at - size}..{at - 1}) the session holds {n_past} "
                    f"tokens, expected {at}"
                )
    finally:
        _close(engine, session)
    played.rows.append(row)
    played.held.append(problem)
    return played


def play_conversation(engine: Any, model: Any, case: dict[str, Any]) -> Played:
    """Each turn of ``case["turns"]`` on one new session: truncate to ``keep`` when the
    session holds more, append the rest of the whole render; the row after each turn."""
    played, n_past = Played(), 0
    session = _session(engine, model)
    try:
        for t in case["turns"]:
            problem = None
            if t["keep"] < n_past:
                said = call(engine, "session", session, t["keep"], method="session_truncate")
                if said != t["keep"]:
                    problem = f"session_truncate to {t['keep']} tokens answered {said!r}"
            n_past, row = _append(engine, session, t["ids"][t["keep"] :])
            if problem is None and n_past != len(t["ids"]):
                problem = f"the session holds {n_past} tokens, the new render has {len(t['ids'])}"
            played.rows.append(row)
            played.held.append(problem)
            n_past = len(t["ids"])  # what it should hold: the next turn's instructions assume it
    finally:
        _close(engine, session)
    return played


def play_reuse(engine: Any, model: Any, case: dict[str, Any]) -> Played:
    """The steps of ``case`` on the engine's sessions (labels ``a``, ``b`` mapped to the ids
    ``session_open`` answers): the row at each judged point, and per point the first count
    its session held wrongly before it."""
    sessions, points = case["sessions"], case["points"]
    played = Played(rows=[np.empty(0, np.float32)] * len(points), held=[None] * len(points))
    opened: dict[str, str] = {}
    wrong: dict[str, str] = {}  # label -> the first count it held wrongly
    try:
        for step in case["steps"]:
            label = step["session"]
            if step["op"] == "open":
                opened[label] = _session(engine, model)
            elif step["op"] == "close":
                _close(engine, opened.pop(label))
            else:
                start, end = step["span"]
                n_past, row = _append(engine, opened[label], sessions[label][start:end])
                if n_past != end and label not in wrong:
                    wrong[label] = (
                        f"after appending tokens {start}..{end - 1} session {label} holds {n_past} tokens, "
                        f"expected {end}"
                    )
                if "point" in step:
                    played.rows[step["point"]] = row
                    played.held[step["point"]] = wrong.get(label)
    finally:
        for sid in opened.values():
            _close(engine, sid)
    return played


@dataclass
class Generations:
    """What the engine answered across one ``state_generate`` case: the cold, warm and
    again generations (``generate`` results), and the first count a session held wrongly."""

    cold: Any = None
    warm: Any = None
    again: Any = None
    held: str | None = None


def play_generate(engine: Any, model: Any, case: dict[str, Any]) -> Generations:
    """Cold: a new session, the prompt appended, generated from. Warm: a second new
    session (the first closed: the engine may keep its cache), the same. Again: that
    session truncated back to the prompt, generated from once more. After each, the
    session must hold the prompt and what was emitted."""
    from specgate.checks.generate import well_formed

    prompt, params, got = case["prompt"], case["params"], Generations()

    def generate(session: str, when: str) -> Any:
        answer = call(engine, "session", session, params, method="session_generate")
        if not isinstance(answer, dict) or not isinstance(answer.get("n_past"), int):
            raise EngineError(f"session_generate answered {type(answer).__name__} without an integer n_past")
        generated = well_formed(answer.get("generated"))
        expected = len(prompt) + len(generated["ids"])
        if got.held is None and answer["n_past"] != expected:
            got.held = (
                f"after the {when} generation the session holds {answer['n_past']} tokens, expected {expected} "
                f"(the prompt's {len(prompt)} and the {len(generated['ids'])} emitted)"
            )
        return generated

    def prompted() -> str:
        session = _session(engine, model)
        n_past, _ = _append(engine, session, prompt)
        if got.held is None and n_past != len(prompt):
            got.held = f"a new session holds {n_past} tokens after the {len(prompt)}-token prompt"
        return session

    session = prompted()
    try:
        got.cold = generate(session, "cold")
    finally:
        _close(engine, session)
    session = prompted()
    try:
        got.warm = generate(session, "warm")
        said = call(engine, "session", session, len(prompt), method="session_truncate")
        if got.held is None and said != len(prompt):
            got.held = f"session_truncate to {len(prompt)} tokens answered {said!r}"
        got.again = generate(session, "again")
    finally:
        _close(engine, session)
    return got


def judge_generate(
    conformance_class: str, model_id: str, case: dict[str, Any], got: Generations
) -> str | None:
    """The session counts, then warm and again against cold (the same ids and finish),
    then a greedy cold stream against the reference by the generate gate's near-tie rule."""
    from specgate.checks.generate import CLASS_TIE_TOLERANCE, compare_greedy, stream
    from specgate.outcomes.gate import first_divergence

    if got.held is not None:
        return got.held
    cold = stream(got.cold)
    for when, other in (
        ("warm (a second session over the prompt, after the first was closed)", got.warm),
        ("again (the session truncated back to the prompt)", got.again),
    ):
        if stream(other) != cold:
            return f"the {when} generation departs from the cold one: {first_divergence(cold, stream(other))}"
    if case["params"].get("temperature", 1.0) > 0:
        return None  # a seeded stream's draws are the sample and generate gates' to judge
    failure, _ = compare_greedy(case["reference"], got.cold, CLASS_TIE_TOLERANCE[conformance_class])
    return failure and f"the cold generation departs from the reference's greedy stream: {failure}"


def play_batch(engine: Any, model: Any, case: dict[str, Any]) -> Played:
    """The case's prompts in one ``batch_logits`` request: one row per prompt, in order."""
    prompts = case["prompts"]
    answer = call(engine, "batch", model, prompts, method="batch_logits")
    if isinstance(answer, NamedLogprobs):
        rows: list[Any] = [
            NamedLogprobs(answer.n_vocab, answer.ids[k : k + 1], answer.logprobs[k : k + 1], answer.unnamed)
            for k in range(len(answer))
        ]
    else:
        array = np.asarray(answer, dtype=np.float32)
        if array.ndim != 2 or len(array) != len(prompts):
            raise EngineError(
                f"batch_logits answered shape {array.shape}, not one row per prompt ({len(prompts)})"
            )
        rows = list(array)
    if len(rows) != len(prompts):
        raise EngineError(f"batch_logits answered {len(rows)} rows for {len(prompts)} prompts")
    return Played(rows=rows, held=[None] * len(prompts))


def judge_batch(conformance_class: str, model_id: str, case: dict[str, Any], played: Played) -> str | None:
    """The first prompt whose row is not its alone one-shot prefill's, named: its place in
    the batch, its length against the batch's longest."""
    longest = max(len(p) for p in case["prompts"])
    for k, ((ids, reference), row) in enumerate(zip(judged_points(case), played.rows, strict=True)):
        failure, cmp = judge_row(conformance_class, model_id, ids, reference, row)
        if failure is None:
            continue
        kl = (
            f"differs from its one-shot prefill alone by KL {cmp.kl_mean:.3g}"
            if cmp is not None
            else "is wrong"
        )
        return (
            f"prompt {k + 1} of {len(case['prompts'])} ({case['labels'][k]}, {len(ids)} tokens; the batch's "
            f"longest has {longest}): its last position's row {kl}: {failure}"
        )
    return None


def judged_points(case: dict[str, Any]) -> list[tuple[list[int], dict[str, Any]]]:
    """A state case's judged points, in the order its rows are played: (the ids the session
    holds, the reference at their last position) — the prompt's end; every turn; every
    point of a reuse case."""
    if "turns" in case:
        return [(t["ids"], t["reference"]) for t in case["turns"]]
    if "points" in case:
        return [(case["sessions"][p["session"]][: p["n"]], p["reference"]) for p in case["points"]]
    if "prompts" in case:
        return list(zip(case["prompts"], case["references"], strict=True))
    return [(case["ids"], case["reference"])]


def _last_row(row: np.ndarray | NamedLogprobs) -> tuple[str | None, Any]:
    """``row`` as the logits answer of the one position the logits check reads (the last:
    a case's ``positions`` is ``[len(ids) - 1]``), or why it is not one."""
    if isinstance(row, NamedLogprobs):
        if (bad := logit_named.well_formed(1, row)) is not None:
            return f"the last position's named log-probabilities: {bad}", None
        return None, row
    if row.ndim != 1 or not np.isfinite(row).all():
        return f"the last position's logits are not a finite row (shape {row.shape})", None
    return None, row[None, :]


def judge_row(
    conformance_class: str,
    model_id: str,
    ids: list[int],
    reference: dict[str, Any],
    row: np.ndarray | NamedLogprobs,
) -> tuple[str | None, Any]:
    """The logits gate's check of one class on the last position of ``ids``: None or why not,
    and the comparison (``kl_mean`` is the position's KL)."""
    problem, got = _last_row(row)
    if problem is not None:
        return problem, None
    case = {"ids": ids, "positions": [len(ids) - 1], "hf": reference, "llamacpp": reference}
    return logits.check(conformance_class, model_id, case, got)


def unjudged(conformance_class: str, model_id: str, case: dict[str, Any], played: Played) -> str | None:
    """Why a named row could not be judged at all (its top-1 unnamed and no candidate the
    reference ranks named: ``logits.unjudged``), at the first such judged point; None when
    every point was judged. The case is then refused, never passed on nothing."""
    where = "turn" if "turns" in case else "point"
    for number, ((ids, reference), row) in enumerate(zip(judged_points(case), played.rows, strict=False), 1):
        _, cmp = judge_row(conformance_class, model_id, ids, reference, row)
        if cmp is not None and (reason := logits.unjudged(row, cmp)):
            return reason if "ids" in case else f"{where} {number}: {reason}"
    return None


def judge_incremental(
    conformance_class: str, model_id: str, case: dict[str, Any], played: Played
) -> str | None:
    failure, cmp = judge_row(conformance_class, model_id, case["ids"], case["reference"], played.rows[0])
    held = played.held[0]
    if held is None and failure is None:
        return None
    kl = f"; a one-shot prefill differs by KL {cmp.kl_mean:.3g}" if cmp is not None else ""
    if held is not None:
        return f"{held}{kl}" + (f" ({failure})" if failure else ", the logits within the class")
    return f"the last position's logits differ from a one-shot prefill of the prompt: {failure}"


#: How a metric's worst value over a case's judged points is taken: the largest distance,
#: the lowest agreement.
WORST = {"max_abs_dlogit": max, "kl_mean": max, "top1_agree_ties_excused": min}


def measured(conformance_class: str, model_id: str, case: dict[str, Any], played: Played) -> dict[str, float]:
    """The class's reported metrics (``logits.CLASSES``) at their worst over the case's
    judged points (the prompt's end; every turn): the numbers the verdict read, for the
    report, pass or fail. A point whose row is not finite has none."""
    points = judged_points(case)
    names = logits.CLASSES[conformance_class][1]
    values: dict[str, list[float]] = {name: [] for name in names}
    for (ids, reference), row in zip(points, played.rows, strict=False):
        _, cmp = judge_row(conformance_class, model_id, ids, reference, row)
        if cmp is not None:
            for name in names:
                values[name].append(float(getattr(cmp, name)))
    return {name: WORST[name](got) for name, got in values.items() if got}


def _quote(text: str) -> str:
    return "`" + text.replace("`", "'").replace("\n", "\\n") + "`"


def dropped(turn: dict[str, Any]) -> str:
    """What the turn dropped from the cache, for a message: the tokens, and why (the
    drift's offset and both texts, or the seam)."""
    stale = turn.get("stale")
    if not stale:
        return ""
    where = (
        f"offset {stale['offset']}: {_quote(stale['cached'])} vs {_quote(stale['new'])}"
        if stale["offset"] is not None
        else f"a seam at token {stale['token']}: the same text, other tokens"
    )
    n = stale["dropped"]
    return f"{n} KV token{'s' * (n != 1)} of the past render that the new render replaces ({where})"


def judge_conversation(
    conformance_class: str, model_id: str, case: dict[str, Any], played: Played
) -> str | None:
    """The first turn whose session or logits are wrong, named: turn, token counts, and at
    a drift the offset and both texts."""
    for number, (turn, row, held) in enumerate(zip(case["turns"], played.rows, played.held, strict=True), 1):
        failure, cmp = judge_row(conformance_class, model_id, turn["ids"], turn["reference"], row)
        if held is None and failure is None:
            continue
        kl = f"a fresh prefill differs by KL {cmp.kl_mean:.3g}" if cmp is not None else failure
        what = dropped(turn)
        if held is not None and what and "holds" in held:
            message = f"turn {number}: the engine kept {what} ({held}); {kl}"
        elif held is not None:
            message = f"turn {number}: {held}; {kl}"
        elif what:
            message = f"turn {number}: after dropping {what}, {kl}: {failure}"
        else:
            message = (
                f"turn {number} (appending tokens {turn['keep']}..{len(turn['ids']) - 1}): {kl}: {failure}"
            )
        return message
    return None


def play_chat(engine: Any, model: Any, case: dict[str, Any]) -> Played:
    """Each turn of ``case["turns"]`` sent to one new conversation (``conversation_turn``: its
    messages, system prompt and keywords): per turn the ids the engine's cache holds and the
    last row."""
    played = Played()
    conversation = str(
        call(engine, "conversation", model, dict(case.get("kwargs", {})), method="conversation_open")
    )
    try:
        for t in case["turns"]:
            answer = call(engine, "conversation", conversation, t["append"], t.get("system"), dict(t.get("kwargs", {})),
                          method="conversation_turn")  # fmt: skip
            got = answer["logits"]
            row = got if isinstance(got, NamedLogprobs) else np.asarray(got, dtype=np.float32).reshape(-1)
            played.ids.append([int(i) for i in answer["ids"]])
            played.rows.append(row)
            played.held.append(None)
    finally:
        with contextlib.suppress(Exception):  # the verdict is the answers'; a failing close is not judged
            call(engine, "conversation", conversation, method="conversation_close")
    return played


def _first_difference(a: list[int], b: list[int]) -> int:
    return next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def held_ids(turn: dict[str, Any], past: list[int], got: list[int]) -> str | None:
    """Why a chat engine's cache holds ``got`` and not the whole render's ids after
    ``turn`` (``past``: the whole render's ids of the turn before), or None when it holds
    them: a seam — the past render's ids followed by the delta tokenized alone (the
    token, both tokenizations); a drift kept — the past render's ids, stale, followed by
    the new render's past them (the offset and both texts); else the first difference."""
    ids = turn["ids"]
    if got == ids:
        return None
    seam = turn.get("seam")
    if seam is not None and got == seam["alone"]:
        at = seam["token"]
        return (
            f"the engine's cache holds the past render's tokens followed by the delta tokenized alone: a seam at "
            f"token {at}, {seam['alone'][at : at + 4]} where the whole render tokenized gives {ids[at : at + 4]} "
            f"(the same text, other tokens)"
        )
    if turn.get("stale") and len(past) < len(ids) and got == past + ids[len(past) :]:
        return (
            f"the engine kept {dropped(turn)} — a template drift — and appended the new render's tokens after "
            f"them (its cache holds {len(got)} ids, the first {_first_difference(got, ids)} of the whole render's)"
        )
    at = _first_difference(got, ids)
    return (
        f"the engine's cache holds {len(got)} ids, the whole render tokenized {len(ids)}; they first differ at index "
        f"{at}: engine {got[at : at + 4]} vs render {ids[at : at + 4]}"
    )


def judge_chat(conformance_class: str, model_id: str, case: dict[str, Any], played: Played) -> str | None:
    """The first turn whose ids or logits are wrong, named: the ids' cause (``held_ids``:
    a seam, a drift kept, or where they differ) and the logits' distance from a fresh
    prefill of the whole render."""
    past: list[int] = []
    for number, (turn, row, got) in enumerate(zip(case["turns"], played.rows, played.ids, strict=True), 1):
        held = held_ids(turn, past, got)
        past = turn["ids"]
        failure, cmp = judge_row(conformance_class, model_id, turn["ids"], turn["reference"], row)
        if held is None and failure is None:
            continue
        kl = (
            f"a fresh prefill of the whole render differs by KL {cmp.kl_mean:.3g}"
            if cmp is not None
            else failure
        )
        if held is not None:
            return f"turn {number}: {held}; {kl}" + (
                f" ({failure})" if failure else ", the logits within the class"
            )
        return f"turn {number}: the ids are the whole render's, but {kl}: {failure}"
    return None


def judge_reuse(conformance_class: str, model_id: str, case: dict[str, Any], played: Played) -> str | None:
    """The first judged point whose session count or logits are wrong, named: the session,
    what it holds, and what the other session held past the shared prefix."""
    shared = case["shared"]
    for point, (ids, reference), row, held in zip(
        case["points"], judged_points(case), played.rows, played.held, strict=True
    ):
        failure, cmp = judge_row(conformance_class, model_id, ids, reference, row)
        if held is None and failure is None:
            continue
        label = point["session"]
        other = "b" if label == "a" else "a"
        kl = f"a fresh prefill differs by KL {cmp.kl_mean:.3g}" if cmp is not None else failure
        where = (
            f"session {label} holding {len(ids)} tokens, the first {min(shared, len(ids))} shared with "
            f"session {other} (which differs from token {shared} on)"
        )
        if held is not None:
            return f"{where}: {held}; {kl}"
        return f"{where}: {kl}: {failure}"
    return None


def record_answer(record: dict[str, Any]) -> NamedLogprobs:
    """A recorded last-position row (``topk_record`` form) as the logits answer of that one
    position: the record's top-k ids and log-probabilities named, nothing said of the rest
    (the form in which the logits stage judges an engine naming only its top candidates)."""
    ids, logprobs, _ = logit_metrics.parse_record(record)
    row = dict(zip(ids[0].tolist(), logprobs[0].tolist(), strict=True))
    return NamedLogprobs.from_rows([row], int(ids.max()) + 1, "a recorded row names its top-k only")


def judge_record(
    conformance_class: str, model_id: str, ids: list[int], reference: dict[str, Any], answer: dict[str, Any]
) -> tuple[str | None, Any]:
    """``judge_row`` for an answer that is itself a recorded row (two snapshots' records of one
    point): the logits gate's check of the class on the ids both name (``logits.check`` of a
    named answer: max |Δ log-prob| over the reference's top-k, KL a lower bound), and the top-1
    judged as a whole row's is — the answer's first id is its row's top-1, which the named form
    cannot know on a flat row whose top-k holds little of the mass."""
    case = {"ids": ids, "positions": [len(ids) - 1], "hf": reference, "llamacpp": reference}
    failure, cmp = logits.check(conformance_class, model_id, case, record_answer(answer))
    if cmp.disagreements:
        return failure, cmp
    ref_ids, ref_lp, ref_lse = logit_metrics.parse_record(reference)
    top = int(logit_metrics.parse_record(answer)[0][0, 0])
    if top != int(ref_ids[0, 0]):
        ref_logits = ref_lp[0] + ref_lse[0]
        hit = np.flatnonzero(ref_ids[0] == top)
        # outside the reference's top-k the answer's top scores at most the k-th logit
        margin = float(ref_logits[0] - (ref_logits[hit[0]] if hit.size else ref_logits[-1]))
        tie = (
            2 * logits.exact_tolerance(model_id)
            if conformance_class == "exact"
            else logits.QUANTIZED_TIE_MARGIN
        )
        if margin >= tie:
            cmp.disagreements.append({"position": len(ids) - 1, "reference_top": int(ref_ids[0, 0]),
                                      "engine_top": top, "reference_margin": margin})  # fmt: skip
            why = f"top-1 differs: reference {int(ref_ids[0, 0])} answer {top} (reference margin {margin:.4f} >= {tie:g})"
            failure = f"{failure}; {why}" if failure else why
    return failure, cmp


#: The stages judged on last-position rows: stage -> (the capability asked, how a case is
#: played, how a class judges it). The gates read it (``specgate/gates/test_state.py``).
ROW_STAGES = {
    "state_incremental": ("session", play_incremental, judge_incremental),
    "state_conversation": ("session", play_conversation, judge_conversation),
    "state_reuse": ("session", play_reuse, judge_reuse),
    "state_batch": ("batch", play_batch, judge_batch),
    "state_chat": ("conversation", play_chat, judge_chat),
}


def gate_rows(request, engine, specgate, model, model_id, case_id, case, conformance_class, stage, what):
    """One case of a stage judged on last-position rows (``ROW_STAGES``: its capability,
    how it is played, how it is judged): asked once for both classes, the class's metrics
    reported, a named row that names nothing judgeable refused, else failed or passed."""
    capability, play, judge = ROW_STAGES[stage]
    label = f"[{stage}/{conformance_class}] model {model_id}, {what}"
    claims(engine, capability, conformance_class)
    played = specgate.answers.get((stage, model.id, case_id), lambda: play(engine, model, case))
    report_metrics(request, measured(conformance_class, model_id, case, played))
    failure = judge(conformance_class, model_id, case, played)
    if failure is None and (reason := unjudged(conformance_class, model_id, case, played)):
        refused(f"{label}: {reason}")
    fail_if(failure, label)
