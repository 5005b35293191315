"""The oracle's fast versions equal its definitions.

``oracle.bpe.merge`` (the merge loop as stated) and ``oracle.attention.attention``
(dense softmax(QKᵀ/√d + mask)V) are the specification; ``oracle.bpe_fast`` and
``oracle.attention_blocked`` are what the pipeline runs. These properties hold the
fast versions to the definitions: BPE exactly (the same symbols, on small random merge
tables and on the real Qwen3 ranks), attention to float32 rounding (``ATTENTION_TOL``).
The forward pass on weights kept transposed (``oracle.weights.Weights.matmul``) is held
to its definition on weights dequantized on use, on the tiny models (``FORWARD_TOL``).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oracle import attention, attention_blocked, bpe, bpe_fast
from oracle.byte_level import to_standin
from oracle.forward import Model
from oracle.trace import Recorder, all_points
from specgate.plugin import model_missing
from specgate.supply import models
from specgate.supply.models import model_ref
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


# -- the forward pass: kept transposed weights change only rounding ----------------------------

# With its weights within the budget, the forward multiplies float32 matrices kept transposed,
# [in, out] (``oracle.weights.Weights.matmul``); with a zero budget it dequantizes each matrix on
# use and multiplies it as stored, [out, in] — the definition, x Wᵀ. BLAS blocks and sums the
# two layouts in another order; on the tiny models (|logit| <= 17, activations O(1)) measured
# max |Δ| 1.4e-5 on the logits and 1.1e-6 (relative to the point's largest value) on the trace
# points of these tests. 1e-4 (the definition's own
# split-vs-one-prefill bound, tests/oracle/test_forward.py SPLIT_TOL) hides nothing a wrong
# weight, transposition or bias moves (|Δ| ~ 0.1 and up).
FORWARD_TOL = 1e-4
# Both architectures (qwen2: q/k/v biases; qwen3: QK-norm, head_dim != n_embd / n_head), a
# tied model (its embedding rows read from the kept output matrix), float32 and quantized.
FORWARD_MODELS = ["tiny-qwen2-f32", "tiny-qwen3-q4_k", "tiny-qwen2-tied-q6_k", "tiny-qwen3-f32"]


def kept_and_streamed(model_id: str) -> tuple[Model, Model]:
    if model_id not in models.cached_tiny_models():
        model_missing(f"{model_id} (run: specgate models tiny)")
    path = model_ref(model_id).gguf
    return Model.from_gguf(path), Model.from_gguf(path, budget_bytes=0)


def assert_close(got: np.ndarray, want: np.ndarray, what: str) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype == np.float32, what
    assert np.abs(got - want).max() <= FORWARD_TOL * max(1.0, float(np.abs(want).max())), what


@pytest.mark.parametrize("model_id", FORWARD_MODELS)
def test_kept_weights_forward_equals_the_definition(model_id):
    """A prompt longer than an attention block and past the 8 rows from which the output
    projection changes its order, steps on the KV cache, a second prefill after them (it
    reads every cached key and value); then every trace point of a fresh prompt."""
    fast, plain = kept_and_streamed(model_id)
    ids = [int(x) for x in np.random.default_rng(11).integers(0, 151_643, 70)]
    assert_close(fast.prefill(ids), plain.prefill(ids), "prefill")
    assert fast.weights.cached_bytes > 0 and plain.weights.cached_bytes == 0
    token = 42
    for n in range(3):
        assert_close(fast.step(token), plain.step(token), f"step {n}")
        token += 1000
    assert_close(fast.prefill(ids[:5]), plain.prefill(ids[:5]), "prefill after steps")
    assert fast.n_past == plain.n_past == 78
    fast.reset()
    plain.reset()
    points = all_points(plain.hparams.n_layer)
    got, want = Recorder(points), Recorder(points)
    fast.prefill(ids[:20], trace=got)
    plain.prefill(ids[:20], trace=want)
    assert set(got.values) == set(points)
    for point in points:
        assert_close(got.values[point], want.values[point], point)


@pytest.mark.parametrize("model_id", ["tiny-qwen2-f32", "tiny-qwen3-q4_k"])
def test_outputs_are_the_asked_rows_of_all_logits(model_id):
    model, _ = kept_and_streamed(model_id)
    ids = [int(x) for x in np.random.default_rng(12).integers(0, 151_643, 30)]
    want = model.prefill(ids)
    step = model.step(7)
    model.reset()
    assert_close(model.prefill(ids, outputs=[0, 17, -1]), want[[0, 17, -1]], "outputs")
    assert model.n_past == 30  # every position still entered the KV cache
    assert_close(model.step(7), step, "the step after")
