"""The logits comparison's lean paths against their plain definitions.

``compare_topk`` reads the engine's log-probabilities at the recorded ids without
building a [positions, n_vocab] log-probability array; ``all_finite`` proves a whole
answer finite with one sum. Each is held here to the definition it replaces, on
drawn logits that include huge magnitudes (a sum that overflows), NaN and infinities.
"""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from specgate.checks import logit_metrics


def plain_compare_topk(record, positions, got, tie_margin):
    """The definition: each recorded row's full float64 log-softmax, then the ids read."""
    ids, lp, lse = logit_metrics.parse_record(record)
    g = np.asarray(got, dtype=np.float64)[positions]
    lq = np.take_along_axis(logit_metrics.log_softmax(g)[0], ids, axis=-1)
    sel = np.take_along_axis(g, ids, axis=-1)
    p, q = np.exp(lp), np.exp(lq)
    p_rest = np.clip(1.0 - p.sum(-1), 1e-300, None)
    q_rest = np.clip(1.0 - q.sum(-1), 1e-300, None)
    kl = np.maximum((p * (lp - lq)).sum(-1) + p_rest * np.log(p_rest / q_rest), 0.0)
    return float(np.abs(sel - (lp + lse[:, None])).max()), float(kl.mean()), float(kl.max()), g.argmax(-1)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 70),  # past CHUNK_POSITIONS: more than one chunk
    vocab=st.integers(2, 300),
    scale=st.sampled_from([0.1, 5.0, 40.0]),
    k=st.integers(1, 8),
)
def test_compare_topk_equals_plain_log_softmax(seed, n, vocab, scale, k):
    rng = np.random.default_rng(seed)
    ref = (rng.standard_normal((n, vocab)) * scale).astype(np.float32)
    got = (ref + rng.standard_normal((n, vocab)).astype(np.float32) * np.float32(0.01 * scale)).astype(
        np.float32
    )
    positions = sorted(rng.choice(n, size=int(rng.integers(1, n + 1)), replace=False).tolist())
    record = logit_metrics.topk_record(ref, positions, min(k, vocab))
    # the engine's rows at the recorded positions (what the gate asks for); the definition reads them out of all
    cmp = logit_metrics.compare_topk(record, positions, got[positions], tie_margin=0.5)
    max_abs, kl_mean, kl_max, top = plain_compare_topk(record, positions, got, 0.5)
    assert cmp.max_abs_dlogit == max_abs
    # the same float64 operations on the same values: equal up to the last bit or two
    np.testing.assert_allclose([cmp.kl_mean, cmp.kl_max], [kl_mean, kl_max], rtol=1e-9, atol=1e-15)
    assert cmp.top1_agree == float(np.mean(top == logit_metrics.parse_record(record)[0][:, 0]))


def test_compare_topk_sees_a_planted_shift():
    """Not vacuous: one logit moved is seen in max |Δ| and the KL, as the plain path sees it."""
    rng = np.random.default_rng(1)
    ref = rng.standard_normal((40, 500)).astype(np.float32)
    record = logit_metrics.topk_record(ref, list(range(40)), 16)
    got = ref.copy()
    top = int(ref[37].argmax())
    got[37, top] -= 3.0
    cmp = logit_metrics.compare_topk(record, list(range(40)), got, tie_margin=0.1)
    max_abs, kl_mean, _, _ = plain_compare_topk(record, list(range(40)), got, 0.1)
    assert abs(cmp.max_abs_dlogit - 3.0) < 1e-5 and cmp.max_abs_dlogit == max_abs
    assert cmp.kl_mean > 1e-3 and np.isclose(cmp.kl_mean, kl_mean, rtol=1e-9)
    assert [d["position"] for d in cmp.disagreements] == [37]


special = st.sampled_from([np.nan, np.inf, -np.inf, 3e38, -3e38, 0.0, 1.0])


@settings(max_examples=200, deadline=None)
@given(hnp.arrays(np.float32, hnp.array_shapes(min_dims=1, max_dims=2, max_side=40),
                  elements=st.one_of(st.floats(-10, 10, width=32), special)))  # fmt: skip
def test_all_finite_is_isfinite_all(a):
    assert logit_metrics.all_finite(a) == bool(np.isfinite(a).all())


def test_all_finite_when_the_sum_overflows():
    """Every element finite but the float32 sum infinite: still finite (the elements are looked at)."""
    a = np.full((4, 8), 3e38, dtype=np.float32)
    assert logit_metrics.all_finite(a)
    a[2, 5] = np.nan
    assert not logit_metrics.all_finite(a)
