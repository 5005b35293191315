"""The state stages' comparison: an engine's session (PROTOCOL.md 4.7) driven through a
case, and its last-position logits held to a fresh one-shot prefill in the logits
stage's conformance classes (``specgate.checks.logits``: the same check, tolerances and
metrics, on the one judged position).

* ``play_incremental``: a new session, the prompt appended chunk by chunk; after each
  append the session must hold the tokens appended so far (a new session holds nothing).
* ``play_conversation``: a new session, per turn the KV the new render no longer holds
  truncated (``keep``: a template drift, a seam) and only the rest appended; the session
  must then hold the whole render, and its logits are judged per turn.

A judged row is the full array or, from an engine that names only some candidates
(``impl.named_logprobs``: llama-cpp-python's server names its top-k by text), the named
log-probabilities of that one position, judged as the logits stage judges them
(``specgate.checks.logit_named``: a KL lower bound over the reference's top-k ids it names
and one "rest"; nothing claimed about the ids it does not name).

Playing is class-free (the engine is asked once per case, whichever classes read the
answer); ``judge_*`` judges one class. A session the engine holds wrongly (a count
off after an append or a truncate) fails every class, the logits' distance named too.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from impl.named_logprobs import NamedLogprobs
from specgate.checks import logit_named, logits
from specgate.outcomes.gate import call


@dataclass
class Played:
    """What the engine answered across one case: the last logits row per judged point
    (the prompt's end; each turn), and what it held wrongly on the way (per point)."""

    rows: list[np.ndarray | NamedLogprobs] = field(default_factory=list)
    held: list[str | None] = field(default_factory=list)


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


def _as_positions(row: np.ndarray | NamedLogprobs, n: int) -> tuple[str | None, Any]:
    """``row`` as the logits answer of ``n`` positions the logits check reads (only the
    last is read: every other row of the view is the same memory), or why it is not one."""
    if isinstance(row, NamedLogprobs):
        if (bad := logit_named.well_formed(1, row)) is not None:
            return f"the last position's named log-probabilities: {bad}", None
        k = row.ids.shape[1]
        return None, NamedLogprobs(
            row.n_vocab, np.broadcast_to(row.ids, (n, k)), np.broadcast_to(row.logprobs, (n, k)), row.unnamed
        )
    if row.ndim != 1 or not np.isfinite(row).all():
        return f"the last position's logits are not a finite row (shape {row.shape})", None
    return None, np.broadcast_to(row, (n, len(row)))


def judge_row(
    conformance_class: str,
    model_id: str,
    ids: list[int],
    reference: dict[str, Any],
    row: np.ndarray | NamedLogprobs,
) -> tuple[str | None, Any]:
    """The logits gate's check of one class on the last position of ``ids``: None or why not,
    and the comparison (``kl_mean`` is the position's KL)."""
    problem, got = _as_positions(row, len(ids))
    if problem is not None:
        return problem, None
    case = {"ids": ids, "positions": [len(ids) - 1], "hf": reference, "llamacpp": reference}
    return logits.check(conformance_class, model_id, case, got)


def unjudged(conformance_class: str, model_id: str, case: dict[str, Any], played: Played) -> str | None:
    """Why a named row could not be judged at all (its top-1 unnamed and no candidate the
    reference ranks named: ``logits.unjudged``), at the first such judged point; None when
    every point was judged. The case is then refused, never passed on nothing."""
    points = [case["ids"]] if "turns" not in case else [t["ids"] for t in case["turns"]]
    references = [case["reference"]] if "turns" not in case else [t["reference"] for t in case["turns"]]
    for number, (ids, reference, row) in enumerate(zip(points, references, played.rows, strict=False), 1):
        _, cmp = judge_row(conformance_class, model_id, ids, reference, row)
        if cmp is not None and (reason := logits.unjudged(row, cmp)):
            return reason if "turns" not in case else f"turn {number}: {reason}"
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
    points = [(case["ids"], case["reference"])] if "turns" not in case else [
        (t["ids"], t["reference"]) for t in case["turns"]
    ]  # fmt: skip
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
