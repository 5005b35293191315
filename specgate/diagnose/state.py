"""The state stages' catalogue: known deviations applied to the oracle's sessions.

A failing ``state_incremental``, ``state_conversation``, ``state_reuse`` or ``state_batch``
case is played again, on the engine and on the oracle's sessions (``oracle.session.Session``)
with one *knob* of what an engine keeps between requests deviated — each a classic defect
of a KV cache:

* ``no_truncate=True``        ``session_truncate`` answers ``n`` but the cache keeps its
                              KV (and its count): across a template drift or a token seam
                              the new turn is appended after the past render's stale KV
* ``sessions_shared=True``    a new session is the last one, uncleared: it starts with the
                              tokens the last session held when it was closed
* ``rope_shift=1``            a block appended after cached tokens is rotated by RoPE one
                              position too far (its mask and the cache are right)
* ``boundary_kv_zero=True``   a block of several tokens appended after cached tokens reads
                              the last cached key and value as zeros: the attention bug of a
                              chunked prefill at the chunk boundary
* ``prefix_keep_extra=1``     a prefix cache: a session's first append starts from the KV of
                              the longest prefix another session holds (open, or one of the
                              last ``POOL`` closed) — one token too many, the first token
                              where the two differ kept
* ``prefix_fork_aliased=True`` the same prefix cache sharing the other session's KV instead
                              of copying it: the new session writes into the other's cache
* ``batch_left_pad_unmasked=True`` ``batch_logits`` left-pads the shorter prompts to the
                              longest with ``PAD`` and attends to the pads (positions shifted)
* ``batch_rows_by_length=True`` ``batch_logits`` answers the rows in length order, not the
                              order asked

The batch knobs are ``DeviatedSessions.batch_logits``'s (each prompt from an empty KV
cache, the oracle's definition) and a ``state_batch`` case is played without sessions:
one ``batch_logits`` request (``play_batch``), no priming.

The first two and the prefix cache are the session's (``DeviatedSessions``, the oracle's
session ops with the knob); the position and the boundary the forward's (``SessionModel``:
``forward.DeviatedModel``, the oracle's forward rebuilt from its own parts, with the RoPE
angles or the attention's keys and values of an append after cached tokens deviated). With no knob the sessions compute
what the oracle's do; the oracle itself is untouched.

**Played the same way.** An engine's answer and each deviated oracle's are what the
state gate reads (``specgate.checks.state``: ``play_incremental`` / ``play_conversation``
— the logits row at each judged point and what the session held wrongly there), after
``POOL`` empty sessions (opened, emptied by ``session_truncate`` to 0, closed) and one
*priming* session: opened, emptied, handed the case's first ``PRIMER`` tokens, closed. A
correct engine's next session is new and empty; one whose sessions share their KV starts
the case holding exactly those tokens, and a prefix cache's pool of closed sessions holds
nothing of earlier cases (only the primer, a prefix of the case's first session, reused
rightly) — whatever the engine served before — so the same case gives the same answer
every time it is asked. (A prefix cache's case that failed in the run only through what
an earlier case left in its pool passes here: it is not named.)

An answer is *the same* as another when every judged point's row meets the case's
conformance class against the other's (``specgate.checks.state.judge_row``, the gate's
check: ``exact`` max |Δlogit|, ``quantized`` KL and top-1) and the session held the same
counts (the same ``held`` messages). A case the engine *passed* in the run does not
contradict ``sessions_shared``: its session may have been the engine's first, with
nothing to inherit (``applies``).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from impl.named_logprobs import NamedLogprobs
from impl.protocol import Engine
from oracle import rope
from specgate.checks import state as state_check
from specgate.diagnose.forward import DeviatedModel, class_measured, topk_record
from specgate.diagnose.tokenizer import Hypothesis, _h

SESSION_ROWS = ",".join(
    f"{stage}/{conformance_class}"
    for stage in ("state_incremental", "state_conversation", "state_reuse")
    for conformance_class in ("exact", "quantized")
)
#: The rows of ``batch_logits`` (the optional capability ``batch``): played without sessions.
BATCH_ROWS = "state_batch/exact,state_batch/quantized"
STATE_ROWS = f"{SESSION_ROWS},{BATCH_ROWS}"
#: The rows a prefix cache's reuse is diagnosed on: a second session's (``applies``).
REUSE_ROWS = "state_reuse/exact,state_reuse/quantized"
#: The token a batch's shorter prompts are left-padded with (``batch_left_pad_unmasked``).
PAD = 0
#: Tokens of the case the priming session holds when it is closed.
PRIMER = 4
#: Closed sessions a prefix cache keeps to reuse (besides the open ones).
POOL = 8
TOP_K = 64  # the top-k a deviated answer keeps as a reference, as in the snapshots
#: answers of one model kept (a case's rows are asked by both classes): a judged point is one
#: row of n_vocab float32 (0.6 MB on the Qwen vocabularies), a case up to 8 of them.
MAX_ANSWER_BYTES = 128 << 20
#: What the evidence of a diagnosis says the deviated answers were compared with.
REFERENCE = (
    "the oracle's sessions played the same way (oracle.session.Session, whose logits after any chunking "
    "are the one-shot prefill's within the class)"
)


# ---------------------------------------------------------------------------
# the sessions with knobs


class SessionModel(DeviatedModel):
    """The oracle's forward for a session (the last position's logits of each append),
    with the forward knobs of a state deviation applied (none: the oracle's own)."""

    def __init__(self, gguf: Any, knobs: Mapping[str, Any], weights: Any) -> None:
        super().__init__(gguf, knobs, weights)
        self.keep = slice(-1, None)  # a session reads the last position's logits only

    def _attention_block(
        self, i: int, x: np.ndarray, positions: np.ndarray, cos: np.ndarray, sin: np.ndarray
    ) -> np.ndarray:
        shift = int(self.knobs.get("rope_shift", 0))
        if shift and positions[0] > 0:  # appended after cached tokens: rotated `shift` positions too far
            cos, sin = rope.rope_angles(positions + shift, self.hparams.head_dim, self.hparams.rope_base)
        return super()._attention_block(i, x, positions, cos, sin)

    def _attend(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, positions: np.ndarray) -> np.ndarray:
        start = int(positions[0])
        if self.knobs.get("boundary_kv_zero") and q.shape[1] > 1 and start > 0:
            k, v = k.copy(), v.copy()  # the cache's own arrays stay right
            k[:, start - 1] = 0.0
            v[:, start - 1] = 0.0
        return super()._attend(q, k, v, positions)


class DeviatedSessions(Engine):
    """The oracle's sessions (``oracle.session.Session`` over a ``SessionModel``) with the
    knobs applied, answering the session ops as an engine does."""

    name = "oracle"
    capabilities = frozenset({"session", "batch"})
    classes = frozenset({"exact", "quantized"})

    def __init__(self, m: ModelSessions, knobs: Mapping[str, Any]) -> None:
        self.m, self.knobs = m, dict(knobs)
        self.sessions: dict[str, Any] = {}
        self.last: Any = None
        self.opened = 0
        self.closed: list[Any] = []  # the prefix cache's pool of closed sessions, the last POOL

    def session_open(self, model: Any) -> str:
        from oracle.session import Session

        self.opened += 1
        sid = f"s{self.opened}"
        shared = self.knobs.get("sessions_shared") and self.last is not None
        self.sessions[sid] = self.last if shared else Session(self.m.session_model(self.knobs))
        self.last = self.sessions[sid]
        return sid

    def session_append(self, session: str, ids: Sequence[int]) -> dict[str, Any]:
        mine, ids = self.sessions[session], [int(i) for i in ids]
        if "prefix_keep_extra" in self.knobs or "prefix_fork_aliased" in self.knobs:
            ids = self._from_prefix(mine, ids)
        n_past, row = mine.append(ids)
        return {"n_past": n_past, "logits": row}

    def _from_prefix(self, mine: Any, ids: list[int]) -> list[int]:
        """A prefix cache: an empty session's first append starts from the KV of the longest
        prefix another session holds (kept ``prefix_keep_extra`` tokens past it; shared, not
        copied, with ``prefix_fork_aliased``) and evaluates only the rest of ``ids``."""
        others = [s for s in (*self.sessions.values(), *self.closed) if s is not mine and s.ids]
        if mine.ids or not others:
            return ids

        def shared(s: Any) -> int:
            return next(
                (k for k, (x, y) in enumerate(zip(s.ids, ids, strict=False)) if x != y),
                min(len(s.ids), len(ids)),
            )

        donor = max(others, key=shared)
        keep = min(
            shared(donor) + int(self.knobs.get("prefix_keep_extra", 0)), len(ids) - 1, donor.model.n_past
        )
        if keep <= 0:
            return ids
        cache = donor.model.cache
        mine.model.cache = cache if self.knobs.get("prefix_fork_aliased") else copy.deepcopy(cache)
        mine.model.cache.truncate(keep)
        mine.ids = ids[:keep]
        return ids[keep:]

    def batch_logits(self, model: Any, prompts: Sequence[Sequence[int]]) -> np.ndarray:
        """Each prompt's last-position logits from an empty KV cache — in length order with
        ``batch_rows_by_length``; left-padded to the longest with ``PAD`` tokens, attended
        and shifting the positions, with ``batch_left_pad_unmasked``."""
        rows = [[int(i) for i in p] for p in prompts]
        if self.knobs.get("batch_rows_by_length"):
            rows = sorted(rows, key=len)  # answered in the order batched, not the order asked
        if self.knobs.get("batch_left_pad_unmasked"):
            longest = max(len(p) for p in rows)
            rows = [[PAD] * (longest - len(p)) + p for p in rows]
        forward = self.m.session_model(self.knobs)
        out = []
        for ids in rows:
            forward.reset()
            out.append(forward.prefill(ids, outputs=[-1])[-1])
        return np.stack(out)

    def session_truncate(self, session: str, n: int) -> int:
        if self.knobs.get("no_truncate"):
            return n  # answered, not done: the KV and the count stay
        return self.sessions[session].truncate(n)

    def session_close(self, session: str) -> None:
        closed = self.sessions.pop(session, None)
        if closed is not None:
            self.closed = [*self.closed, closed][-POOL:]


def first_ids(inp: Mapping[str, Any]) -> list[int]:
    """The ids a case starts with (its prompt; its first turn's render; its first session's)."""
    data = inp["data"]
    if "sessions" in data:
        return list(data["sessions"][data["steps"][0]["session"]])
    return list(data["ids"] if "ids" in data else data["turns"][0]["ids"])


def primed(engine: Any, model: Any, inp: Mapping[str, Any]) -> None:
    """``POOL`` empty sessions (opened, emptied, closed), then the priming session: opened,
    emptied, handed the case's first ``PRIMER`` tokens, closed."""
    from specgate.outcomes.gate import call

    for ids in [*([None] * POOL), first_ids(inp)[:PRIMER]]:
        session = str(call(engine, "session", model, method="session_open"))
        try:
            call(engine, "session", session, 0, method="session_truncate")
            if ids:
                call(engine, "session", session, ids, method="session_append")
        finally:
            with contextlib.suppress(Exception):  # as the gate's close: a failing close is not judged
                call(engine, "session", session, method="session_close")


def played(engine: Any, model: Any, model_id: str, inp: Mapping[str, Any]) -> StateAnswer:
    """The case played on ``engine`` after the priming session, as the state gate plays it
    (a batch without sessions: one ``batch_logits`` request)."""
    data = inp["data"]
    if inp["stage"] == "state_batch":
        b = state_check.play_batch(engine, model, data)
        return StateAnswer(model_id, [list(ids) for ids in data["prompts"]], b.rows, b.held)
    primed(engine, model, inp)
    if inp["stage"] == "state_incremental":
        p = state_check.play_incremental(engine, model, data)
        return StateAnswer(model_id, [list(data["ids"])], p.rows, p.held)
    play = state_check.play_conversation if inp["stage"] == "state_conversation" else state_check.play_reuse
    p = play(engine, model, data)
    return StateAnswer(model_id, [list(ids) for ids, _ in state_check.judged_points(data)], p.rows, p.held)


# ---------------------------------------------------------------------------
# answers and their comparison


@dataclass(eq=False)
class StateAnswer:
    """What the state gate reads of one case: per judged point (the prompt's end; each
    turn) the ids judged, the last position's logits and what the session held wrongly."""

    model_id: str
    points: list[list[int]]
    rows: list[np.ndarray | NamedLogprobs]
    held: list[str | None]
    _records: dict[int, dict[str, Any]] = field(default_factory=dict)

    def record(self, k: int) -> dict[str, Any]:
        """Point ``k``'s row as a reference: its top-k (``forward.topk_record``)."""
        if k not in self._records:
            self._records[k] = topk_record(np.asarray(self.rows[k], dtype=np.float32)[None], TOP_K)
        return self._records[k]

    @property
    def nbytes(self) -> int:
        return sum(
            int(r.ids.nbytes + r.logprobs.nbytes)
            if isinstance(r, NamedLogprobs)
            else int(np.asarray(r).nbytes)
            for r in self.rows
        )


def _row(row: Any) -> np.ndarray | NamedLogprobs:
    """A judged point's row as the state check takes it: an engine's named log-probabilities
    as they are, any other answer as a float32 array."""
    return row if isinstance(row, NamedLogprobs) else np.asarray(row, dtype=np.float32)


def judged(stage: str, reference: StateAnswer, got: StateAnswer) -> list[tuple[str | None, Any]]:
    """The class's check of ``got`` at each judged point with ``reference``'s row as the
    reference (``specgate.checks.state.judge_row``): (why not, or None; the comparison)."""
    conformance_class = stage.partition("/")[2]
    return [
        state_check.judge_row(conformance_class, reference.model_id, ids, reference.record(k), _row(row))
        for k, (ids, row) in enumerate(zip(reference.points, got.rows, strict=False))
    ]


def same(stage: str, reference: Any, got: Any) -> bool:
    """Whether ``got`` meets the conformance class of ``stage`` against ``reference`` at
    every judged point, its session holding the same counts."""
    if len(got.rows) != len(reference.rows) or got.held != reference.held:
        return False
    return all(failure is None for failure, _ in judged(stage, reference, got))


def measured(stage: str, triples: Sequence[tuple[Any, Any, Any]]) -> str:
    """What the evidence says was measured over (deviated, engine, spec'd oracle) answers."""
    to_deviated = [
        c for deviated, got, _ in triples for _, c in judged(stage, deviated, got) if c is not None
    ]
    to_spec = [c for _, got, spec in triples for _, c in judged(stage, spec, got) if c is not None]
    if not to_deviated or not to_spec:
        return "with the same session counts at every judged point"
    return "with the same session counts and, at every judged point, " + class_measured(
        stage.partition("/")[2], triples[0][0].model_id, to_deviated, to_spec
    )


# ---------------------------------------------------------------------------
# the catalogue module's interface (``specgate.diagnose.diagnoser``)


@dataclass
class ModelSessions:
    """One model's deviated sessions, on the weights of the oracle's own loaded forward."""

    model: Any
    gguf: Any
    weights: Any
    _answers: dict[tuple[Any, ...], StateAnswer] = field(default_factory=dict)
    _answer_bytes: int = 0

    def session_model(self, knobs: Mapping[str, Any]) -> SessionModel:
        return SessionModel(self.gguf, knobs, self.weights)

    def answer(self, inp: Mapping[str, Any], knobs: Mapping[str, Any]) -> StateAnswer:
        key = (inp["stage"], inp["case"], tuple(sorted(knobs.items())))
        if key in self._answers:
            return self._answers[key]
        found = played(DeviatedSessions(self, knobs), self.model, self.model.id, inp)
        if self._answer_bytes + found.nbytes <= MAX_ANSWER_BYTES:
            self._answers[key] = found
            self._answer_bytes += found.nbytes
        return found


def reference(model: Any) -> ModelSessions:
    """The model's deviated sessions, on the weights of the oracle's own loaded forward
    (``impl.oracle.loaded_forward_model``: one float32 copy for the oracle engine too)."""
    from impl.oracle import loaded_forward_model

    plain = loaded_forward_model(model.gguf)
    return ModelSessions(model, plain.weights.gguf, plain.weights)


def answer(stage: str, m: ModelSessions, inp: Mapping[str, Any], knobs: Mapping[str, Any]) -> StateAnswer:
    return m.answer(inp, knobs)


def applies(stage: str, m: ModelSessions, inp: Mapping[str, Any], knobs: Mapping[str, Any]) -> bool:
    """Whether the deviation can show on the case: a truncate (a conversation that drops
    KV), an append after cached tokens (of several tokens, for the boundary), a case the
    engine failed (a session inherited from an earlier one shows only after one), a second
    session of the case (a prefix cache's reuse: the priming session alone is a prefix of
    the case's first, all of it reused rightly — a case that fails through the sessions of
    earlier cases is not played here)."""
    data = inp["data"]
    batch_knobs = {"batch_left_pad_unmasked", "batch_rows_by_length"}
    if "prompts" in data:  # a batch: no session, its prompts' lengths
        lengths = [len(p) for p in data["prompts"]]
        return set(knobs) <= batch_knobs and not (
            (knobs.get("batch_left_pad_unmasked") and len(set(lengths)) < 2)
            or (knobs.get("batch_rows_by_length") and lengths == sorted(lengths))
        )
    if set(knobs) & batch_knobs:
        return False
    if "ids" in data:  # incremental: appends of these sizes, never a truncate
        later, truncates = list(data["chunks"][1:]), False
    elif "steps" in data:  # reuse: each session's appends after its first, never a truncate
        later, truncates, seen = [], False, set()
        for step in (s for s in data["steps"] if s["op"] == "append"):
            if step["session"] in seen:
                later.append(step["span"][1] - step["span"][0])
            seen.add(step["session"])
    else:
        turns = data["turns"]
        later = [len(t["ids"]) - t["keep"] for t in turns[1:]]
        truncates = any(t["drop"] > 0 for t in turns)
    return not (
        (knobs.get("no_truncate") and not truncates)
        or (knobs.get("sessions_shared") and inp["gated"] == "pass")
        or (knobs.get("rope_shift") and not later)
        or (knobs.get("boundary_kv_zero") and not any(n > 1 for n in later))
        or (
            ("prefix_keep_extra" in knobs or "prefix_fork_aliased" in knobs)
            and len(data.get("sessions", ())) < 2
        )
    )


def case_input(record: Any) -> dict[str, Any] | None:
    """A state record's case, from the snapshot it was gated on, and how it was gated."""
    from specgate.upkeep.recorded_cases import recorded_case

    stage = record.stage.partition("/")[0]
    case = recorded_case(record, stage)  # under the snapshot root the record carries
    if not isinstance(case, Mapping) or not (
        "ids" in case or case.get("turns") or case.get("steps") or case.get("prompts")
    ):
        return None
    return {"stage": stage, "case": record.case, "gated": record.outcome, "data": case}


def ask(engine: Any, stage: str, model: Any, inp: Mapping[str, Any]) -> StateAnswer:
    """The engine's answers on the case, played after the priming session (an exception
    where it refuses)."""
    from specgate.outcomes.gate import not_applicable

    if stage.partition("/")[2] not in engine.classes:
        not_applicable(f"{engine.name} does not claim the {stage.partition('/')[2]!r} class")
    got = played(engine, model, model.id, inp)
    for row in got.rows:
        if isinstance(row, NamedLogprobs):  # checked as the gate checks it (state_check.judge_row)
            continue
        if row.ndim != 1 or not np.isfinite(row).all():
            raise ValueError(f"a last position's logits are not a finite row (shape {row.shape})")
    return got


CATALOGUE: tuple[Hypothesis, ...] = (
    *_h("no_truncate", SESSION_ROWS,
        "keeps the KV a truncate drops: session_truncate answers n but the cache keeps the past render's "
        "tokens, so after a template drift or a token seam the new turn is appended after stale KV",
        no_truncate=True),
    *_h("sessions_shared", SESSION_ROWS,
        "hands a new session the last session's KV uncleared: a session opened after another starts "
        "with the tokens the other held", sessions_shared=True),
    *_h("position_off_by_one", SESSION_ROWS,
        "rotates a block appended after cached tokens one position too far (RoPE at position p + 1): "
        "the positions after an append are off by one", rope_shift=1),
    *_h("chunk_boundary", SESSION_ROWS,
        "loses the last cached key and value at a chunk boundary: a block of several tokens appended "
        "after cached tokens attends to that position's key and value as zeros", boundary_kv_zero=True),
    *_h("prefix_off_by_one", REUSE_ROWS,
        "reuses one token too many of another session's KV: a prefix cache starts a new session's first "
        "append from the longest prefix another session holds, keeping the first token where the two "
        "differ", prefix_keep_extra=1),
    *_h("fork_aliased", REUSE_ROWS,
        "shares another session's KV instead of copying it: a prefix cache starts a new session from the "
        "longest prefix another session holds, and each then writes into the one cache the two hold",
        prefix_fork_aliased=True),
    *_h("batch_padded", BATCH_ROWS,
        "pads a batch's shorter prompts on the left and attends to the pads: batch_logits evaluates each "
        "prompt after pad tokens, unmasked, its positions shifted by as many", batch_left_pad_unmasked=True),
    *_h("batch_sorted", BATCH_ROWS,
        "answers a batch's rows in length order: batch_logits sorts the prompts by length to batch them and "
        "returns the rows in that order, not the order asked", batch_rows_by_length=True),
)  # fmt: skip
