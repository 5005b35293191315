"""A session: one token sequence kept in the model's KV cache between requests.

An engine that talks in turns does not re-evaluate the whole prompt each time; it
keeps the keys and values of the tokens it has seen and evaluates only what is new.
The session is that state, and its operations are the ones an engine offers:

* ``append(ids)`` — evaluate ``ids`` after the cached tokens (positions continue
  from ``n``); answer the count of tokens in the session and the logits at its
  last position. Any split of a sequence into appends gives the logits of one
  prefill (float32 rounding aside: the same sums in differently shaped matmuls).
* ``generate(params)`` — the decode loop (``oracle.decode_loop``) from the session's
  last logits: each sampled id joins the cache, the stop token does not.
* ``truncate(n)`` — keep the first ``n`` tokens; the KV of the rest is dropped
  (``KVCache.truncate``), never read again.
* ``sync(ids)`` — make the session hold exactly ``ids``: keep the longest common
  prefix of what it holds and ``ids``, drop the KV from the first differing token,
  and evaluate from there. This is the only correct reuse of a cache: a token whose
  left context changed has stale keys and values, and so has every token after it.
* ``reset()`` — an empty session.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from oracle import decode_loop
from oracle.forward import Model
from oracle.template import parting


@dataclass(frozen=True)
class Synced:
    """What ``Session.sync`` did: ``kept`` cached tokens reused, ``dropped`` stale ones
    removed (from token index ``kept`` on), ``appended`` evaluated."""

    kept: int
    dropped: int
    appended: int


class Session:
    """The token ids in a model's KV cache, and the logits at the last of them."""

    def __init__(self, model: Model) -> None:
        self.model = model
        self.reset()

    def reset(self) -> None:
        self.model.reset()
        self.ids: list[int] = []
        self.logits: np.ndarray | None = None  # at the last position; None when not yet evaluated
        self.evaluated = 0  # tokens evaluated since the session began: the work done

    def __len__(self) -> int:
        return len(self.ids)

    def append(self, ids: Sequence[int]) -> tuple[int, np.ndarray]:
        """Evaluate ``ids`` after the session's tokens: (tokens in the session, last logits)."""
        ids = [int(i) for i in ids]
        if not ids:
            raise ValueError("append needs at least one token id")
        logits = self.model.prefill(ids, outputs=[-1])
        self.ids += ids
        self.evaluated += len(ids)
        self.logits = logits[-1]
        return len(self.ids), self.logits

    def truncate(self, n: int) -> int:
        """Keep the first ``n`` tokens; the logits at the new last position are
        evaluated again only when asked for (``last_logits``)."""
        if not 0 <= n <= len(self.ids):
            raise ValueError(f"cannot truncate the session to {n} tokens: it holds {len(self.ids)}")
        if n < len(self.ids):
            self.model.truncate(n)
            del self.ids[n:]
            self.logits = None
        return len(self.ids)

    def last_logits(self) -> np.ndarray:
        """The logits at the last position (re-evaluating the last token after a truncate)."""
        if self.logits is None:
            if not self.ids:
                raise ValueError("the session is empty: there is no last position")
            last = self.ids[-1]
            self.truncate(len(self.ids) - 1)
            self.append([last])
        assert self.logits is not None
        return self.logits

    def sync(self, ids: Sequence[int]) -> Synced:
        """Hold exactly ``ids``: reuse the common prefix, drop the rest, evaluate the remainder."""
        ids = [int(i) for i in ids]
        if not ids:
            raise ValueError("a session cannot be synced to an empty sequence")
        at = parting(self.ids, ids)
        kept = len(self.ids) if at is None else at
        if kept == len(ids) and kept > 0:  # ids is a prefix of the session: re-evaluate its last token
            kept -= 1
        dropped = len(self.ids) - kept
        self.truncate(kept)
        self.append(ids[kept:])
        return Synced(kept, dropped, len(ids) - kept)

    def generate(
        self, piece: Callable[[int], bytes], params: Mapping[str, Any], stop_tokens: Sequence[int]
    ) -> dict[str, Any]:
        """The decode loop from the session's last logits; the emitted ids join the session
        (the penalty window is seeded from the session's tail, as from a prompt's)."""
        source = _SessionSource(self)
        result = decode_loop.generate(source, piece, list(self.ids), params, stop_tokens)
        pending = result["ids"][source.stepped :]  # the loop does not evaluate its last token
        if pending:
            self.append(pending)
        return result


class _SessionSource:
    """The decode loop's logits source over a session: the prompt is the session itself
    (already evaluated), each step appends one token."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.stepped = 0

    def prefill(self, ids: Sequence[int]) -> np.ndarray:
        return self.session.last_logits()[None]

    def step(self, token: int) -> np.ndarray:
        self.stepped += 1
        return self.session.append([token])[1]
