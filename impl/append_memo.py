"""What an append to a session's KV cache gave, kept so the same append is not computed twice.

The state stages play many sessions over the same tokens: a conversation's turns again in
every scenario of the reuse cases, a prompt's first chunks in every chunking. An append is a
function of the cache's contents, the ids appended and the positions projected to logits
(``oracle.forward.Model.prefill``): the same three give the same new keys and values in
every layer and the same logits, bit for bit. So an append is keyed by those three — the
cache's *contents*, hashed, not the ids a session says it holds: an engine that swaps, shares
or corrupts caches (the planted state bugs) keys what its cache really holds — and a key
seen before is answered by writing the kept rows into the cache and returning the kept
logits, exactly what computing it would do. A key not seen is computed as without the memo,
so no answer depends on which cases ran before it.

The memo belongs to one loaded model (its weights; a forward plant applied before the model
runs is in every entry), bounded in bytes, least recently used first out.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from oracle.kv_cache import KVCache

#: The bytes of kept rows and logits per loaded model: ~400 appends of a few tokens on the
#: 0.5B model (a logits row of its 151,936-token vocabulary is 0.6 MB; a token's keys and
#: values 24.6 kB), more than one model's state stages play.
MEMO_BYTES = 256 * 2**20


@dataclass(frozen=True)
class Appended:
    """One append's result: every layer's new keys and values, [n_head_kv, T, head_dim]
    each, and the logits it answered."""

    keys: tuple[np.ndarray, ...]
    values: tuple[np.ndarray, ...]
    logits: np.ndarray

    @property
    def nbytes(self) -> int:
        return self.logits.nbytes + sum(a.nbytes for a in (*self.keys, *self.values))


def append_key(cache: KVCache, ids: Sequence[int], outputs: Sequence[int] | None) -> bytes:
    """The digest of what an append computes from: the cache's shape and contents (every
    layer's keys and values of its ``n_past`` positions), the ids and the projected positions."""
    h = hashlib.blake2b(digest_size=20)
    h.update(np.array([cache.n_ctx, cache.n_past, len(ids)], np.int64).tobytes())
    h.update(np.asarray(ids, np.int64).tobytes())
    h.update(b"all" if outputs is None else np.asarray(outputs, np.int64).tobytes())
    for layer in range(cache.n_layer):
        for stored in cache.rows(layer, 0, cache.n_past):
            for head in stored:  # each head's rows are contiguous
                h.update(head)
    return h.digest()


class AppendMemo:
    """Appends already computed on one model, keyed by ``append_key``."""

    def __init__(self, budget: int = MEMO_BYTES) -> None:
        self.budget = budget
        self.held = 0
        self._entries: OrderedDict[bytes, Appended] = OrderedDict()
        self.hits = self.misses = 0

    def append(
        self,
        cache: KVCache,
        ids: Sequence[int],
        outputs: Sequence[int] | None,
        compute: Callable[[], np.ndarray],
    ) -> np.ndarray:
        """The logits of appending ``ids`` to ``cache`` (``compute`` does it on a miss); the
        cache holds the new rows either way."""
        key = append_key(cache, ids, outputs)
        if (kept := self._entries.get(key)) is not None:
            self._entries.move_to_end(key)
            self.hits += 1
            for layer, (k, v) in enumerate(zip(kept.keys, kept.values, strict=True)):
                cache.append(layer, k, v)
            cache.advance(len(ids))
            return kept.logits.copy()
        self.misses += 1
        start = cache.n_past
        logits = compute()
        if cache.n_past != start + len(ids):  # not an append as defined: keep nothing
            return logits
        rows = [cache.rows(layer, start, cache.n_past) for layer in range(cache.n_layer)]
        entry = Appended(
            tuple(k.copy() for k, _ in rows), tuple(v.copy() for _, v in rows), np.array(logits, copy=True)
        )
        if entry.nbytes <= self.budget:
            self._entries[key] = entry
            self.held += entry.nbytes
            while self.held > self.budget:
                self.held -= self._entries.popitem(last=False)[1].nbytes
        return logits
