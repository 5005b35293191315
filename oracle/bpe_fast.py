"""Byte-pair merging in O(n log n): the steps of ``oracle.bpe.merge``, without rescanning.

``oracle.bpe`` states the rule — fuse the leftmost lowest-rank adjacent pair until
none has a rank — as the obvious loop, which rescans every pair after each fusion:
quadratic, and a piece can be thousands of characters long (a line of CJK text is a
single "word"). This module takes the same fusions in the same order with two
helpers, and is what ``oracle.tokenizer`` runs; ``tests/oracle/test_definitions.py``
holds it to the definition's exact output.
"""

from __future__ import annotations

import heapq
import itertools

from oracle.bpe import Ranks


def merge(symbols: list[str], ranks: Ranks) -> list[str]:
    """``oracle.bpe.merge``'s result, the same fusions in the same order: the symbols
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
