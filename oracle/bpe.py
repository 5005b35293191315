"""Byte-pair merging: replaying the training-time merge list on one piece.

Training learned merges in order of frequency; a merge's rank is its position in
``tokenizer.ggml.merges`` (rank 0 = the most frequent pair). Encoding replays
them greedily: start from single stand-in characters (one per byte), and while
some adjacent pair is in the merge table, fuse the leftmost pair with the lowest
rank. This reconstructs the segmentation the vocabulary was built for.

There is deliberately no "the whole piece is already a vocabulary entry"
shortcut: an entry need not be reachable through merges (Qwen3.5 holds a
Devanagari cluster that no merge produces), and every reference splits it.

After merging, each symbol is looked up in the vocabulary. A symbol that is not
there (a vocabulary inconsistent with its merges) becomes one token per byte —
never id 0, which would silently put the vocabulary's first entry in the output.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Mapping

Ranks = Mapping[tuple[str, str], int]


def merge(symbols: list[str], ranks: Ranks) -> list[str]:
    """Fuse adjacent symbols, lowest-rank pair first (leftmost on ties), until no
    adjacent pair has a rank.

    The obvious loop — scan every adjacent pair, fuse the best, repeat — is
    quadratic, and a piece can be thousands of characters long (a line of CJK text
    is a single "word"). So the same steps are taken with two helpers: the symbols
    sit in a linked list (``nxt``/``prv`` indices; a fused-away symbol becomes
    None), and the candidate pairs wait in a heap ordered by (rank, position). A
    popped candidate whose two symbols are no longer neighbours with those exact
    strings is stale and skipped; each fusion pushes the two new pairs it creates.
    """
    parts: list[str | None] = list(symbols)
    n = len(parts)
    nxt = list(range(1, n + 1))  # index of the next live symbol; n = none
    prv = list(range(-1, n - 1))  # index of the previous live symbol; -1 = none
    heap = [
        (rank, i, a, b)
        for i, (a, b) in enumerate(itertools.pairwise(parts))
        if (rank := ranks.get((a, b))) is not None
    ]
    heapq.heapify(heap)
    while heap:
        _, i, left, right = heapq.heappop(heap)
        j = nxt[i]
        if j == n or parts[i] != left or parts[j] != right:
            continue  # stale: one of the two was fused into something else since
        fused = left + right
        parts[i], parts[j] = fused, None
        nxt[i] = k = nxt[j]
        if k < n:
            prv[k] = i
            if (rank := ranks.get((fused, parts[k]))) is not None:
                heapq.heappush(heap, (rank, i, fused, parts[k]))
        h = prv[i]
        if h >= 0 and (rank := ranks.get((parts[h], fused))) is not None:
            heapq.heappush(heap, (rank, h, parts[h], fused))
    return [s for s in parts if s is not None]


def to_ids(symbols: list[str], vocab: Mapping[str, int]) -> list[int]:
    """Vocabulary ids of merged symbols; a symbol missing from the vocabulary
    falls back to the ids of its single-byte stand-ins (always present: the
    tokenizer refuses a vocabulary without all 256)."""
    ids = []
    for symbol in symbols:
        token = vocab.get(symbol)
        if token is None:
            ids.extend(vocab[ch] for ch in symbol)
        else:
            ids.append(token)
    return ids
