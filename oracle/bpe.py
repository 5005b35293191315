"""Byte-pair merging: replaying the training-time merge list on one piece — the definition.

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

``merge`` here is the loop as stated, quadratic in the piece's length;
``oracle.bpe_fast`` takes the same steps in O(n log n) and is what the tokenizer
runs (a line of CJK text is one piece of thousands of characters). A property test
(``tests/oracle/test_definitions.py``) holds the two to identical output.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

Ranks = Mapping[tuple[str, str], int]


def merge(symbols: list[str], ranks: Ranks) -> list[str]:
    """Fuse adjacent symbols, lowest-rank pair first (leftmost on ties), until no
    adjacent pair has a rank."""
    parts = list(symbols)
    while True:
        ranked = [(ranks[pair], i) for i, pair in enumerate(itertools.pairwise(parts)) if pair in ranks]
        if not ranked:
            return parts
        _, i = min(ranked)  # lowest rank; on a tie, the lowest position
        parts[i : i + 2] = [parts[i] + parts[i + 1]]


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
