"""The oracle's fast versions equal its definitions.

``oracle.bpe.merge`` (the merge loop as stated) and ``oracle.attention.attention``
(dense softmax(QKᵀ/√d + mask)V) are the specification; ``oracle.bpe_fast`` and
``oracle.attention_blocked`` are what the pipeline runs. These properties hold the
fast versions to the definitions: BPE exactly (the same symbols, on small random merge
tables and on the real Qwen3 ranks), attention to float32 rounding (``ATTENTION_TOL``).
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from oracle import attention, attention_blocked, bpe, bpe_fast
from oracle.byte_level import to_standin
from specgate.upkeep.corpus import tokenizer_texts
from tests.hypothesis_budget import examples
from tests.oracle.test_tokenizer_properties import oracle, texts

# -- BPE: the heap over a linked list takes the definition's fusions, in its order -------------


@st.composite
def pieces_and_merges(draw: st.DrawFn) -> tuple[list[str], dict[tuple[str, str], int]]:
    """Merges as training learns them: each new merge fuses two symbols that exist by then
    (letters or earlier merges' results), so chains of fusions ("ab", "abc", "abab") occur,
    with a few unreachable pairs mixed in (a vocabulary inconsistent with its merges). The
    piece is a run of those symbols' text, so the chains fire, with ties and overlaps."""
    symbols, ranks = ["a", "b", "c"], {}
    for _ in range(draw(st.integers(0, 12))):
        left, right = draw(st.sampled_from(symbols)), draw(st.sampled_from(symbols))
        if draw(st.integers(0, 3)) == 0:
            left = draw(st.text("abc", min_size=1, max_size=3))  # maybe unreachable
        ranks.setdefault((left, right), len(ranks))
        symbols.append(left + right)
    piece = "".join(draw(st.lists(st.sampled_from(symbols), max_size=8)))
    return list(piece[:40]), ranks


@given(pieces_and_merges())
def test_fast_merge_equals_the_definition_on_small_tables(piece_and_merges):
    symbols, ranks = piece_and_merges
    assert bpe_fast.merge(symbols, ranks) == bpe.merge(symbols, ranks)


def pieces_merge_alike(text: str) -> None:
    tok = oracle("qwen3-vocab")
    for piece in tok.split(text):
        symbols = list(to_standin(piece.encode("utf-8")))
        assert bpe_fast.merge(symbols, tok.ranks) == bpe.merge(symbols, tok.ranks), piece


# 200: an example costs a few ms (the definition rescans every pair after each fusion). The
# small-table property is where ties and stale heap entries are exercised: planted in bpe_fast,
# a heap entry at a wrong position and a missing stale check each change ~15% of its examples;
# the first was also found here within 100 examples, the second by the corpus test below.
@examples(ci=200)
@given(text=texts)
def test_fast_merge_equals_the_definition_on_qwen3_ranks(text):
    pieces_merge_alike(text)


def test_fast_merge_equals_the_definition_on_the_tokenizer_corpus():
    """Every piece of every corpus text (long CJK lines, emoji sequences, code) with the
    151,387 Qwen3 merges."""
    for case in tokenizer_texts().values():
        pieces_merge_alike(case["text"])


# -- attention: blocks of queries, skipped keys and late normalization change only rounding ----

# Unit-normal q, k, v: each output is a convex combination of value rows (|v| < 6), computed
# in float32 (relative rounding 6e-8) by both; they differ in the order of the S-term sums,
# in scaling q before the product (the definition scales the scores after it) and in dividing
# after the product with V. Measured max |Δ| over a grid of these shapes (168 cases): 9.5e-7.
# Ten times that is the bound, so a misplaced key or a wrong group (|Δ| ~ 0.1 and up) cannot
# hide in it.
ATTENTION_TOL = 1e-5


@given(n_new=st.integers(1, 3 * attention_blocked.QUERY_BLOCK + 5), n_past=st.integers(0, 70),
       heads=st.sampled_from([(4, 4), (6, 2), (8, 1)]), d=st.sampled_from([8, 64]))  # fmt: skip
@settings(max_examples=25, deadline=None)
def test_blocked_attention_equals_the_definition(n_new, n_past, heads, d):
    """Prompts longer than one block (so blocks see different key counts), a cached past
    and every GQA grouping: MHA, 3 query heads per kv head, one kv head for all."""
    rng = np.random.default_rng(n_new * 1000 + n_past)
    (n_head, n_head_kv), s = heads, n_past + n_new
    q = rng.standard_normal((n_head, n_new, d), dtype=np.float32)
    k, v = rng.standard_normal((2, n_head_kv, s, d), dtype=np.float32)
    positions = np.arange(n_past, s)
    want = attention.attention(q, k, v, positions)
    got = attention_blocked.attention(q, k, v, positions)
    assert got.dtype == want.dtype == np.float32
    assert np.abs(got - want).max() <= ATTENTION_TOL
