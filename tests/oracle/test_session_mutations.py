"""Mutation evidence for the session and conversation checks: plant a classic state bug
in the oracle, and the check of ``session_checks.py`` that guards it must fail — while
the unmutated oracle passes the same check on the same input, so it is the mutation
that is caught."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from oracle import attention_blocked, conversation, rope
from oracle.kv_cache import KVCache
from oracle.session import Session, Synced
from specgate.upkeep import corpus
from tests.oracle import session_checks as checks
from tests.oracle.test_session import prompt_ids

QWEN2, QWEN3 = checks.ARCHITECTURES["qwen2"], checks.ARCHITECTURES["qwen3"]


def rope_off_by_one_after_append(mp: pytest.MonkeyPatch) -> None:
    """A chunk appended after cached tokens is rotated one position too far."""
    original = rope.rope_angles
    mp.setattr(rope, "rope_angles", lambda pos, d, base: original(pos + (pos[0] > 0), d, base))


def kv_not_truncated(mp: pytest.MonkeyPatch) -> None:
    """truncate forgets the ids but the cache keeps its length: appends land after stale KV."""
    mp.setattr(KVCache, "truncate", lambda self, n: None)


def chunk_sees_only_itself(mp: pytest.MonkeyPatch) -> None:
    """Chunked prefill's boundary bug: a chunk attends to its own tokens, not the cached ones."""
    original = attention_blocked.attention

    def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, q_positions: np.ndarray) -> np.ndarray:
        n = q.shape[1]
        return original(q, k[:, -n:], v[:, -n:], q_positions - q_positions[0])

    mp.setattr(attention_blocked, "attention", attention)


def append_only_across_drift(mp: pytest.MonkeyPatch) -> None:
    """The engine keeps every cached token and appends what the new render has beyond them."""

    def sync(self: Session, ids: list[int]) -> Synced:
        kept = len(self.ids)
        if len(ids) > kept:
            self.append(ids[kept:])
        return Synced(kept, 0, max(0, len(ids) - kept))

    mp.setattr(Session, "sync", sync)


def delta_tokenized_alone(mp: pytest.MonkeyPatch) -> None:
    """The engine tokenizes the delta by itself and appends it after the past's tokens."""
    original = conversation.increment

    def increment(template: Any, tokenize: Any, past: Any, new: Any, *args: Any) -> conversation.Increment:
        inc = original(template, tokenize, past, new, *args)
        if inc.drift is not None:
            return inc
        joined = (tokenize(inc.past) if inc.past else []) + tokenize(inc.new[len(inc.past) :])
        return conversation.Increment(inc.turn, inc.past, inc.new, joined, inc.drift, inc.seam)

    mp.setattr(conversation, "increment", increment)


def conv(conversation_id: str) -> dict[str, Any]:
    return corpus.multi_turn_conversations()[conversation_id]


ALL_CUTS = list(range(1, 30))  # one token at a time
MUTATIONS: dict[str, tuple[Callable[[pytest.MonkeyPatch], None], Callable[[], str | None]]] = {
    "position-off-by-one-after-append": (
        rope_off_by_one_after_append,
        lambda: checks.chunking_problem(QWEN2, prompt_ids()[:30], [17, 25]),
    ),
    "position-off-by-one-one-token-at-a-time": (
        rope_off_by_one_after_append,
        lambda: checks.chunking_problem(QWEN3, prompt_ids()[:30], ALL_CUTS),
    ),
    "chunk-attends-only-to-itself": (
        chunk_sees_only_itself,
        lambda: checks.chunking_problem(QWEN3, prompt_ids()[:30], [9, 25]),
    ),
    "kv-not-truncated": (
        kv_not_truncated,
        lambda: checks.truncate_problem(QWEN3, prompt_ids(), 20, [11, 12, 13]),
    ),
    "kv-kept-across-a-drift": (
        append_only_across_drift,
        lambda: checks.conversation_problem(QWEN3, "qwen3-vocab", conv("06_reasoning_reply_turns")),
    ),
    "kv-kept-across-a-system-prompt-change": (
        append_only_across_drift,
        lambda: checks.conversation_problem(QWEN2, QWEN2, conv("03_system_prompt_changes")),
    ),
    "delta-tokenized-alone-at-a-seam": (
        delta_tokenized_alone,
        lambda: checks.conversation_problem(QWEN2, QWEN2, conv("21_reply_leading_newlines_turns")),
    ),
}


@pytest.mark.parametrize("mutation", list(MUTATIONS))
def test_state_check_catches(mutation: str, monkeypatch: pytest.MonkeyPatch) -> None:
    plant, check = MUTATIONS[mutation]
    assert check() is None, "the unmutated oracle must pass the check"
    plant(monkeypatch)
    problem = check()
    assert problem is not None, f"mutation {mutation!r} was not caught"
