"""The references' top-n of a step's logits (``impl.llamacpp.generate.top_order``): the
partitioned version equals its definition, a stable full sort, on any row — ties at the
n-th value, infinities, NaN, n past the vocabulary."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from impl.llamacpp.generate import top_order

# few distinct values, so ties (at the n-th value too) are the usual case
VALUES = st.sampled_from([-np.inf, -2.5, -1.0, 0.0, 0.0, 1.0, 3.25, np.inf, np.nan])


@settings(max_examples=400, deadline=None)
@given(
    logits=hnp.arrays(np.float32, st.integers(1, 60), elements=VALUES),
    n=st.integers(0, 70),
)
def test_top_order_is_the_stable_sort(logits, n):
    expected = np.argsort(-logits, kind="stable")[:n]
    assert top_order(logits, n).tolist() == expected.tolist()


def test_top_order_on_a_vocabulary_row():
    row = np.random.default_rng(7).standard_normal(151_936).astype(np.float32)
    row[[5, 900, 151_000]] = row.max() + 1  # a three-way tie for first
    for n in (1, 3, 64):
        assert top_order(row, n).tolist() == np.argsort(-row, kind="stable")[:n].tolist()
    assert top_order(row, 3).tolist() == [5, 900, 151_000]
