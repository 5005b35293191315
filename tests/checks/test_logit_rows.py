"""The logits gate asks for the recorded positions only (PROTOCOL.md 4.3): an answer of
those rows and an answer of every row are judged alike, any other row count is malformed,
and a NaN is reported at the position it sits at in either form.

The references are the snapshot-shaped records of drawn logits (``topk_record``) and the
checks' own verdicts on the answer of every row (the form every engine gave before the
field existed), never the engine's answer itself.
"""

from __future__ import annotations

import numpy as np
import pytest

from impl.named_logprobs import NamedLogprobs
from specgate.checks import logit_metrics, logits

N_IDS, VOCAB = 40, 300
POSITIONS = [0, 5, 6, 20, 39]


def case_of(reference: np.ndarray) -> dict:
    record = logit_metrics.topk_record(reference, POSITIONS, 16)
    return {"ids": list(range(N_IDS)), "positions": POSITIONS, "hf": record, "llamacpp": record}


@pytest.fixture
def reference() -> np.ndarray:
    return (np.random.default_rng(7).standard_normal((N_IDS, VOCAB)) * 4).astype(np.float32)


@pytest.mark.parametrize("conformance_class", ["exact", "quantized"])
@pytest.mark.parametrize("shift", [0.0, 1e-5, 2.0])
def test_the_asked_rows_and_every_row_get_one_verdict(reference, conformance_class, shift):
    case = case_of(reference)
    every = reference.copy()
    every[20, int(reference[20].argmax())] -= shift  # at an asked position: seen (or not) in both forms
    asked = every[POSITIONS]
    assert logits.well_formed(case, every) is None and logits.well_formed(case, asked) is None
    failure_every, cmp_every = logits.check(conformance_class, "tiny-x", case, every)
    failure_asked, cmp_asked = logits.check(conformance_class, "tiny-x", case, asked)
    assert failure_asked == failure_every
    assert cmp_asked == cmp_every
    if shift == 2.0:  # not vacuous: the planted shift fails both forms
        assert failure_every is not None and "position 20" in failure_every
    else:
        assert failure_every is None


def test_a_shift_at_a_position_not_asked_is_not_judged(reference):
    """What the gate judged before the field existed: only the recorded positions."""
    case = case_of(reference)
    every = reference.copy()
    every[10] += np.linspace(0, 5, VOCAB, dtype=np.float32)  # position 10 is not recorded
    assert logits.check("exact", "tiny-x", case, every)[0] is None


@pytest.mark.parametrize("rows", [0, 1, 4, 6, 39, 41])
def test_any_other_row_count_is_malformed(reference, rows):
    case = case_of(reference)
    problem = logits.well_formed(case, np.zeros((rows, VOCAB), dtype=np.float32))
    assert problem is not None and "[5, n_vocab] (the positions asked) or [40, n_vocab]" in problem


@pytest.mark.parametrize("form", ["asked", "every"])
def test_a_nan_is_reported_at_its_position_in_either_form(reference, form):
    every = reference.copy()
    every[39, 3] = np.nan
    answer = every if form == "every" else every[POSITIONS]
    assert logits.well_formed(case_of(reference), answer) == "non-finite logits at positions [39]"


def test_named_answers_take_either_form(reference):
    case = case_of(reference)
    rows = [{int(i): -1.0} for i in reference.argmax(-1)]
    every = NamedLogprobs.from_rows(rows, VOCAB, "why")
    asked = NamedLogprobs.from_rows([rows[p] for p in POSITIONS], VOCAB, "why")
    assert logits.well_formed(case, every) is None and logits.well_formed(case, asked) is None
    assert (
        logits.check("quantized", "tiny-x", case, every)[1]
        == logits.check("quantized", "tiny-x", case, asked)[1]
    )
    three = NamedLogprobs.from_rows(rows[:3], VOCAB, "why")
    assert "named log-probs for 3 positions" in logits.well_formed(case, three)


def test_when_every_position_is_recorded_the_two_forms_are_one(reference):
    """A short prompt: ``positions`` is every index, so the row count cannot be ambiguous."""
    case = {**case_of(reference), "positions": list(range(N_IDS))}
    case["hf"] = case["llamacpp"] = logit_metrics.topk_record(reference, case["positions"], 16)
    assert logits.answered_rows(case, reference) == list(range(N_IDS))
    assert logits.check("exact", "tiny-x", case, reference)[0] is None
