"""The oracle sampler: known answers worked out by hand from the documented step
semantics, and properties that must hold for any logits (hypothesis).

llama.cpp's agreement on real and crafted logits is the sample gate's job
(specgate/gates/test_sample.py); here the oracle is checked against the text of the
spec, independently of any engine."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from oracle import sampler
from oracle.sampler import SamplerError, sample
from tests.hypothesis_budget import examples

OFF = {"top_k": 0, "top_p": 1.0, "min_p": 0.0, "repeat_penalty": 1.0, "temperature": 1.0}


def step(name: str, logits, **params) -> np.ndarray:
    """One step on its own, with everything else neutral."""
    p = sampler.resolve_params({**OFF, **params})
    return sampler.STEPS[name](np.asarray(logits, dtype=np.float64), p)


def kept(x: np.ndarray) -> list[int]:
    return np.flatnonzero(np.isfinite(x)).tolist()


# ---------------------------------------------------------------------------
# known answers


def test_documented_defaults():
    d = sampler.DEFAULTS
    assert (d["temperature"], d["top_k"], d["top_p"], d["repeat_penalty"]) == (0.8, 40, 0.95, 1.1)
    assert (d["frequency_penalty"], d["presence_penalty"], d["seed"], d["min_p"]) == (0.0, 0.0, 42, 0.0)
    assert d["penalty_last_n"] == 64
    assert tuple(d["chain"]) == ("penalties", "top_k", "top_p", "min_p", "temperature")


def test_repeat_penalty_divides_positive_and_multiplies_non_positive():
    out = step("penalties", [0.0, -1.0, 2.0, 1.5, -0.5, 0.25], repeat_penalty=2.0, window=[0, 1, 2, 4, 4])
    assert out.tolist() == [0.0, -2.0, 1.0, 1.5, -1.0, 0.25]  # repeat applies once per distinct token


def test_frequency_and_presence_come_before_repeat():
    out = step(
        "penalties",
        [0.0, -1.0, 2.0, 1.5, -0.5, 0.25],
        repeat_penalty=2.0,
        frequency_penalty=1.0,
        presence_penalty=0.5,
        window=[2, 3, 3, 5],
    )
    # token 2: (2 - 1 - 0.5) / 2; token 3: (1.5 - 2 - 0.5) * 2; token 5: (0.25 - 1 - 0.5) * 2
    assert out.tolist() == [0.0, -1.0, 0.25, -2.0, -0.5, -2.5]


def test_penalty_window_is_the_last_n_tokens_and_skips_out_of_vocabulary_ids():
    logits = [1.0, 1.0, 1.0]
    assert step("penalties", logits, repeat_penalty=2.0, penalty_last_n=2, window=[0, 1, 2]).tolist() == [
        1.0,
        0.5,
        0.5,
    ]
    assert step("penalties", logits, repeat_penalty=2.0, penalty_last_n=0, window=[0]).tolist() == logits
    assert step("penalties", logits, repeat_penalty=2.0, window=[7, -1, 2]).tolist() == [1.0, 1.0, 0.5]
    edge = [0] + [2] * 63  # token 0 is the 64th most recent: still inside the default window
    assert step("penalties", logits, repeat_penalty=2.0, window=edge).tolist() == [0.5, 1.0, 0.5]
    assert step("penalties", logits, repeat_penalty=2.0, window=[0, *edge]).tolist() == [0.5, 1.0, 0.5]
    assert step("penalties", logits, repeat_penalty=2.0, window=[0] + [2] * 64).tolist() == [1.0, 1.0, 0.5]


def test_top_k_keeps_ties_at_the_threshold_and_is_off_at_zero_or_vocab():
    logits = [4.0, 3.0, 2.5, 2.0, 2.0, 1.0, 0.0, -1.0]
    assert kept(step("top_k", logits, top_k=4)) == [0, 1, 2, 3, 4]
    assert kept(step("top_k", logits, top_k=0)) == list(range(8))
    assert kept(step("top_k", logits, top_k=8)) == list(range(8))
    assert kept(step("top_k", logits, top_k=1)) == [0]


def test_top_p_stops_when_strictly_greater():
    quarters = [0.0, 0.0, 0.0, 0.0, -math.inf]
    assert kept(step("top_p", quarters, top_p=0.75)) == [0, 1, 2, 3]  # 0.75 is not > 0.75
    assert kept(step("top_p", quarters, top_p=0.5)) == [0, 1, 2]  # stable: equal probabilities in id order
    assert kept(step("top_p", quarters, top_p=0.74)) == [0, 1, 2]
    assert kept(step("top_p", [0.0, 5.0, 1.0], top_p=0.5)) == [1]  # the crossing token is kept
    assert kept(step("top_p", quarters, top_p=1.0)) == [0, 1, 2, 3]
    assert kept(step("top_p", quarters, top_p=0.0)) == [0, 1, 2, 3]


def test_min_p_keeps_logits_at_least_max_plus_log_p():
    logits = [2.0, 2.0 + math.log(0.5), 2.0 + math.log(0.2), -3.0]
    assert kept(step("min_p", logits, min_p=0.3)) == [0, 1]
    assert kept(step("min_p", logits, min_p=1.0)) == [0]  # the argmax always survives
    assert kept(step("min_p", logits, min_p=0.0)) == [0, 1, 2, 3]


def test_greedy_takes_the_first_maximum_after_penalties():
    two_maxima = [1.0, 3.0, 0.5, 3.0, -2.0]
    out = sample(two_maxima, {"temperature": 0.0, "repeat_penalty": 1.0}, 0.99)
    assert out["token"] == 1 and out["chain"] == ["penalties", "greedy"]
    assert sample(two_maxima, {"temperature": 0.0, "repeat_penalty": 1.5, "window": [1]}, 0.5)["token"] == 3
    assert sample(two_maxima, {"temperature": 5e-7, "repeat_penalty": 1.0}, 0.5)["chain"][-1] == "greedy"
    assert sample(two_maxima, {"temperature": 1e-6, "repeat_penalty": 1.0}, 0.5)["chain"][-1] == "temperature"


def test_draw_takes_the_first_candidate_reaching_r():
    assert sampler.draw([7, 3, 9], [0.5, 0.3, 0.2], 0.5) == 7
    assert sampler.draw([7, 3, 9], [0.5, 0.3, 0.2], 0.5000001) == 3
    assert sampler.draw([7, 3, 9], [0.5, 0.3, 0.2], 0.0) == 7
    assert sampler.draw([7, 3, 9], [0.5, 0.3, 0.1], 0.95) == 9  # total below r: the last candidate


def test_temperature_then_softmax():
    out = sample([0.0, math.log(3.0)], {**OFF, "temperature": 0.5}, 0.1)
    assert out["ids"] == [1, 0]
    assert out["probs"] == pytest.approx([0.9, 0.1])  # 3² : 1


@pytest.mark.parametrize(
    ("params", "r", "message"),
    [
        ({"top_k": -1}, 0.5, "top_k"),
        ({"top_p": 1.5}, 0.5, "top_p"),
        ({"min_p": -0.1}, 0.5, "min_p"),
        ({"temperature": -1.0}, 0.5, "temperature"),
        ({"repeat_penalty": 0.0}, 0.5, "repeat_penalty"),
        ({"penalty_last_n": -1}, 0.5, "penalty_last_n"),
        ({"window": [1, "2"]}, 0.5, "window"),
        ({"chain": ["top_k", "typical"]}, 0.5, "typical"),
        ({"topk": 3}, 0.5, "topk"),
        ({}, 1.0, "r=1.0"),
    ],
)
def test_bad_parameters_are_named(params, r, message):
    with pytest.raises(SamplerError, match=message):
        sample([1.0, 2.0], params, r)


@pytest.mark.parametrize(
    "logits", [[], [float("nan"), 1.0], [-math.inf, -math.inf], [[1.0, 2.0]], [math.inf, 0.0]]
)
def test_bad_logits_are_refused(logits):
    with pytest.raises(SamplerError, match="logits"):
        sample(logits, {}, 0.5)


# ---------------------------------------------------------------------------
# properties

finite_logits = arrays(np.float32, st.integers(2, 60), elements=st.floats(-30, 30, width=32))
windows = st.lists(st.integers(-3, 70), max_size=80)
unit = st.floats(0.0, 1.0, exclude_max=True)


# 200, not 1000: none of the planted sampler defects (top-p with >=, a penalty window of 63)
# fails this identity in 1000+ examples (the gates' known answers catch them); it guards an
# identity on at most 60 logits, and 200 examples cover its cases.
@examples(ci=200)
@given(finite_logits, windows, unit)
def test_top_k_1_equals_greedy(logits, window, r):
    x = sampler.penalties(logits.astype(np.float64), sampler.resolve_params({"window": window}))
    assume(np.sum(x == x.max()) == 1)  # top-k keeps every token tied at the maximum
    greedy = sample(logits, {"window": window, "temperature": 0.0}, r)["token"]
    out = sample(logits, {"window": window, "top_k": 1}, r)
    assert out["token"] == greedy and out["ids"] == [greedy]


# 200, not 1000: none of the planted sampler defects (top-p with >=, a penalty window of 63)
# fails this identity in 1000+ examples (the gates' known answers catch them); it guards an
# identity on at most 60 logits, and 200 examples cover its cases.
@examples(ci=200)
@given(finite_logits, windows, st.floats(0.0, 1.0 - 1e-9))
def test_temperature_towards_zero_equals_greedy(logits, window, r):
    x = sampler.penalties(logits.astype(np.float64), sampler.resolve_params({"window": window}))
    top2 = np.sort(x)[-2:]
    assume(top2[1] - top2[0] > 1e-3)
    greedy = sample(logits, {"window": window, "temperature": 0.0}, r)["token"]
    for t in (1e-7, 1e-5):
        assert sample(logits, {"window": window, "temperature": t}, r)["token"] == greedy


# 200, not 1000: none of the planted sampler defects (top-p with >=, a penalty window of 63)
# fails this identity in 1000+ examples (the gates' known answers catch them); it guards an
# identity on at most 60 logits, and 200 examples cover its cases.
@examples(ci=200)
@given(finite_logits, windows)
def test_neutral_settings_are_no_ops(logits, window):
    base = sampler.penalties(logits.astype(np.float64), sampler.resolve_params({"window": window}))
    for name, neutral in (("top_k", {"top_k": 0}), ("top_p", {"top_p": 1.0}), ("min_p", {"min_p": 0.0})):
        p = sampler.resolve_params({**neutral, "window": window})
        assert np.array_equal(sampler.STEPS[name](base, p), base), name
    steps = sample(logits, {"window": window, "top_k": 0, "top_p": 1.0, "min_p": 0.0}, 0.5)["steps"]
    assert steps[1]["ids"] == steps[0]["ids"] == steps[2]["ids"] == steps[3]["ids"]


# 200, not 1000: none of the planted sampler defects (top-p with >=, a penalty window of 63)
# fails this identity in 1000+ examples (the gates' known answers catch them); it guards an
# identity on at most 60 logits, and 200 examples cover its cases.
@examples(ci=200)
@given(
    finite_logits,
    windows,
    st.floats(1.0, 3.0),
    st.floats(0.0, 2.0),
    st.floats(0.0, 2.0),
    st.integers(0, 80),
)
def test_penalties_never_raise_a_logit(logits, window, repeat, freq, presence, last_n):
    x = logits.astype(np.float64)
    p = sampler.resolve_params(
        {
            "window": window,
            "repeat_penalty": repeat,
            "frequency_penalty": freq,
            "presence_penalty": presence,
            "penalty_last_n": last_n,
        }
    )
    out = sampler.penalties(x, p)
    assert np.all(out <= x)
    recent = set(window[-last_n:]) if last_n else set()
    untouched = [i for i in range(len(x)) if i not in recent]
    assert np.array_equal(out[untouched], x[untouched])
