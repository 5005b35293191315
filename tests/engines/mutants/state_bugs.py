"""Mutant engines: the oracle with one planted state bug each, served over PROTOCOL.md —
the bugs engines that keep a KV cache between requests make. The state gates must fail
each on the right stage (``tests/engines/test_state_mutants.py``):

    python tests/engines/mutants/state_bugs.py BUG

* ``no_truncate``          ``session_truncate`` answers ``n`` but keeps the KV: the cache
                           keeps the past render across a template drift or a seam
                           (``state_conversation``)
* ``position_off_by_one``  a block appended after cached tokens is rotated (RoPE) one
                           position too far (``state_incremental``: one at a time, uneven)
* ``sessions_shared``      ``session_open`` hands out the last session's KV uncleared
                           (``state_incremental``: every case after the first)
* ``chunk_boundary``       a block of several tokens appended after cached tokens reads
                           the last cached key and value as zeros: the attention bug of a
                           chunked prefill at the chunk boundary (``state_incremental``: the
                           uneven chunks only; one token at a time and whole are right)
* ``prefix_off_by_one``    a prefix cache: a new session's first append reuses the KV of
                           the longest prefix another session (open, or closed: kept) holds
                           — one token too many, the first token where the two differ
                           (``state_reuse``: a second session branching off a first)
* ``fork_aliased``         the same prefix cache, the reused KV not copied but shared: the
                           new session writes into the other's cache (``state_reuse``: two
                           sessions open side by side or in turns)
* ``prefix_cache``         the same prefix cache done right (the shared prefix copied, the
                           last token always evaluated): no state bug, every stage passes
* ``seed_carried``         ``session_generate`` draws from one random stream per engine, not
                           one started from the seed by each request: the warm generation
                           differs from the cold one (``state_generate``: the seeded cases)
* ``last_not_held``        ``session_generate`` never evaluates the last emitted id into the
                           cache (the decode loop samples it and stops): the session holds
                           one token too few (``state_generate``)
* ``batch_padded``         ``batch_logits`` left-pads the shorter prompts to the longest with
                           the pad token and evaluates them unmasked: the pads are attended
                           and the positions shifted (``state_batch``: every batch of
                           different lengths)
* ``batch_sorted``         ``batch_logits`` sorts the prompts by length to batch them and
                           answers the rows in that order, not the order asked
                           (``state_batch``: the batches not already sorted)
* ``seam_delta``            a chat engine (``conversation_turn``) that tokenizes each turn's
                           delta alone and appends it after the cached tokens: at a seam
                           ("\\n" + "\\n" where the whole render has "\\n\\n") its cache
                           holds other tokens than the whole render's (``state_chat``: the
                           seam conversations); a drift it handles right
* ``drift_appended``       a chat engine that never drops KV on a template drift: it keeps
                           what it holds and appends the new render's tokens past them
                           (``state_chat``: the drift conversations); a seam it handles right
* ``noisy_append``         a look-alike of no state bug: an append after cached tokens answers
                           its logits plus seeded noise (σ 0.01: beyond the exact tolerance,
                           within the quantized class) — it fails where the position bug does,
                           and no state diagnosis may name it

Every other op is the oracle's, untouched: the logits stage passes on each.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from impl.oracle import OracleEngine


class NoTruncate(OracleEngine):
    def session_truncate(self, session: str, n: int) -> int:
        self._session(session)
        return n  # the defect: the KV (and the ids) past n stay


class SessionsShared(OracleEngine):
    last: Any = None

    def session_open(self, model: Any) -> str:
        sid = super().session_open(model)
        if self.last is not None:  # the defect: the new id reuses the last session, uncleared
            self._sessions[sid] = self.last
        self.last = self._sessions[sid]
        return sid


class NoisyAppend(OracleEngine):
    def session_append(self, session: str, ids: list[int]) -> dict[str, Any]:
        held = len(self._session(session))
        answer = super().session_append(session, ids)
        if held:  # the look-alike: after cached tokens, the right logits plus noise
            noise = np.random.default_rng(held).normal(0.0, 0.01, answer["logits"].shape)
            answer["logits"] = answer["logits"] + noise.astype(np.float32)
        return answer


class PrefixCache(OracleEngine):
    """A prefix cache over the oracle's sessions: a session's first append starts from the
    KV of the longest prefix another session holds (open, or one of the last ``POOL``
    closed), copied and cut to ``keep(p)`` tokens, and evaluates only the rest."""

    POOL = 8
    extra = 0  # tokens kept past the shared prefix: 0 is right
    alias = False  # share the reused KV instead of copying it

    def __init__(self) -> None:
        super().__init__()
        self.closed: list[Any] = []

    def session_close(self, session: str) -> None:
        self.closed = [*self.closed, self._session(session)][-self.POOL :]
        super().session_close(session)

    def session_append(self, session: str, ids: Sequence[int]) -> dict[str, Any]:
        mine, ids = self._session(session), [int(i) for i in ids]
        donors = [s for s in (*self._sessions.values(), *self.closed) if s is not mine and s.ids]
        if not mine.ids and donors:

            def shared(s: Any) -> int:
                return next((k for k, (x, y) in enumerate(zip(s.ids, ids, strict=False)) if x != y),
                            min(len(s.ids), len(ids)))  # fmt: skip

            donor = max(donors, key=shared)
            keep = min(shared(donor) + self.extra, len(ids) - 1, donor.model.cache.n_past)
            if keep > 0:
                mine.model.cache = donor.model.cache if self.alias else copy.deepcopy(donor.model.cache)
                mine.model.cache.truncate(keep)
                mine.ids = ids[:keep]
                ids = ids[keep:]
        n_past, logits = mine.append(ids)
        return {"n_past": n_past, "logits": logits}


class PrefixOffByOne(PrefixCache):
    extra = 1  # the defect: the first differing token's KV is kept too


class ForkAliased(PrefixCache):
    alias = True  # the defect: two sessions write one cache


class SeedCarried(OracleEngine):
    draws = 0

    def session_generate(self, session: str, params: dict[str, Any]) -> dict[str, Any]:
        self.draws += 1  # the defect: the stream goes on from the last request's
        return super().session_generate(
            session, {**params, "seed": int(params.get("seed", 42)) + self.draws - 1}
        )


class LastNotHeld(OracleEngine):
    def session_generate(self, session: str, params: dict[str, Any]) -> dict[str, Any]:
        held = self._session(session)
        answer = super().session_generate(session, params)
        emitted = answer["generated"]["ids"]
        if emitted and answer["generated"]["finish_reason"] == "length":
            held.truncate(len(held) - 1)  # the defect: the last sampled id is never evaluated
            held.last_logits()
        return {**answer, "n_past": len(held)}


class BatchPadded(OracleEngine):
    def batch_logits(self, model: Any, prompts: Sequence[Sequence[int]]) -> Any:
        longest = max(len(p) for p in prompts)
        pad = 0  # the defect: pads in front, attended like tokens, positions shifted
        return super().batch_logits(model, [[pad] * (longest - len(p)) + list(p) for p in prompts])


class BatchSorted(OracleEngine):
    def batch_logits(self, model: Any, prompts: Sequence[Sequence[int]]) -> Any:
        order = sorted(range(len(prompts)), key=lambda k: len(prompts[k]))
        return super().batch_logits(model, [prompts[k] for k in order])  # the defect: rows in that order


class _ChatTurns(OracleEngine):
    """The oracle's chat turn with one step replaced: ``cache(conversation, increment)``
    brings the session to the turn's render (the oracle: ``sync`` to the whole render's ids)."""

    def _turn(self, conversation: Any, messages: Any, system: Any, kwargs: dict[str, Any]) -> None:
        from oracle.conversation import increment, next_state

        c = conversation
        new, new_kwargs = next_state(c.messages, c.kwargs, messages, system, kwargs)
        c.turns += 1
        self.cache(c, increment(c.template, c.tokenize, c.messages, new, c.turns, c.kwargs, new_kwargs))
        c.messages, c.kwargs = new, new_kwargs


class SeamDelta(_ChatTurns):
    def cache(self, c: Any, inc: Any) -> None:
        if inc.drift is None and c.session.ids and inc.delta:
            c.session.append(c.tokenize(inc.delta))  # the defect: the delta tokenized alone
        else:
            c.session.sync(inc.ids)


class DriftAppended(_ChatTurns):
    def cache(self, c: Any, inc: Any) -> None:
        if inc.drift is not None and 0 < len(c.session.ids) < len(inc.ids):
            c.session.append(inc.ids[len(c.session.ids) :])  # the defect: the stale KV kept
        else:
            c.session.sync(inc.ids)


def position_off_by_one() -> None:
    from oracle import rope

    right = rope.rope_angles

    def shifted(positions: np.ndarray, head_dim: int, base: float) -> tuple[np.ndarray, np.ndarray]:
        if positions.size and positions[0] > 0:  # the defect: after an append, one position too far
            positions = positions + 1
        return right(positions, head_dim, base)

    rope.rope_angles = shifted


def chunk_boundary() -> None:
    from oracle import attention_blocked

    right = attention_blocked.attention

    def wrong(q: np.ndarray, k: np.ndarray, v: np.ndarray, q_positions: np.ndarray) -> np.ndarray:
        start = int(q_positions[0])
        if q.shape[1] > 1 and start > 0:  # the defect: the cached key/value at the boundary read as zeros
            k, v = k.copy(), v.copy()
            k[:, start - 1] = 0.0
            v[:, start - 1] = 0.0
        return right(q, k, v, q_positions)

    attention_blocked.attention = wrong


#: bug -> (the engine class, the plant applied before serving)
PLANTS: dict[str, tuple[type[OracleEngine], Callable[[], None]]] = {
    "no_truncate": (NoTruncate, lambda: None),
    "position_off_by_one": (OracleEngine, position_off_by_one),
    "sessions_shared": (SessionsShared, lambda: None),
    "chunk_boundary": (OracleEngine, chunk_boundary),
    "noisy_append": (NoisyAppend, lambda: None),
    "prefix_cache": (PrefixCache, lambda: None),
    "prefix_off_by_one": (PrefixOffByOne, lambda: None),
    "fork_aliased": (ForkAliased, lambda: None),
    "seed_carried": (SeedCarried, lambda: None),
    "last_not_held": (LastNotHeld, lambda: None),
    "batch_padded": (BatchPadded, lambda: None),
    "batch_sorted": (BatchSorted, lambda: None),
    "seam_delta": (SeamDelta, lambda: None),
    "drift_appended": (DriftAppended, lambda: None),
}


if __name__ == "__main__":
    from impl.process.server import serve

    if len(sys.argv) != 2 or sys.argv[1] not in PLANTS:
        print(f"usage: state_bugs.py {{{'|'.join(PLANTS)}}}", file=sys.stderr)
        sys.exit(4)
    engine_class, plant = PLANTS[sys.argv[1]]
    plant()
    sys.exit(serve(engine_class()))
