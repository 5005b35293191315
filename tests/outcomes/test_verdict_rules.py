"""The verdict machinery, case by case and without an engine: the one
``first_difference`` convention, the split gate's offset and its Unicode-version
skew rule, the run verdict over refusals and the answer cache."""

from __future__ import annotations

import pytest

from impl.protocol import EngineError
from specgate.checks.tokenizer import check_split, unicode_version_skew
from specgate.outcomes.gate import Refused, first_difference, text_diff
from specgate.plugin import AnswerCache, GateRecord, run_verdict
from specgate.reports.parity_report import headline, refusal_groups


@pytest.mark.parametrize(
    ("a", "b", "at"),
    [
        ("abc", "abc", None),
        ("abc", "abd", 2),
        ("ab", "abc", 2),  # a proper prefix differs where the shorter one ends
        ("abc", "ab", 2),
        ([], [1], 0),
        ([], [], None),
        (b"\x00\x01", b"\x00\x02", 1),
    ],
)
def test_first_difference_convention(a, b, at):
    assert first_difference(a, b) == at


def test_split_offset_counts_only_pieces_before_the_first_difference():
    # Pieces "c", " ", "d" match again after the difference; the text differs from offset 0.
    failure, disagreement = check_split("ab c d", ["ab", " ", "c", " ", "d"], ["a", "b ", "c", " ", "d"])
    assert disagreement is None
    assert failure is not None and "at text offset 0 ('ab c d')" in failure
    failure, _ = check_split("xy ab", ["xy", " ab"], ["xy", " a", "b"])
    assert "at text offset 2 " in failure


def test_split_pieces_must_tile_the_text():
    failure, _ = check_split("a b", ["a", " b"], ["a", "b"])
    assert failure is not None and "do not tile the input" in failure


# "x𽀀<y 𽀁! z": U+3D000/U+3D001 are letters in newer Unicode data (the reference's) and
# unassigned in Python's unicodedata and Node 20. Under the older tables the pre-tokenizer's
# punctuation arm ` ?[^\s\p{L}\p{N}]+` takes them, so an engine following those splits it so:
NEWER = ["x𽀀", "<y", " 𽀁", "!", " z"]
OLDER = ["x", "𽀀<", "y", " 𽀁!", " z"]


def test_unicode_version_skew_is_a_disagreement_in_the_split_gate():
    text = "x𽀀<y 𽀁! z"
    assert unicode_version_skew(text) is not None and "U+3D000, U+3D001" in unicode_version_skew(text)
    failure, disagreement = check_split(text, NEWER, OLDER)
    assert failure is None
    assert disagreement is not None and "Unicode-version skew" in disagreement
    assert check_split(text, NEWER, NEWER) == (None, None)


def test_a_split_difference_without_unassigned_code_points_still_fails():
    assert unicode_version_skew("x<y z") is None
    failure, disagreement = check_split("x<y z", ["x", "<y", " z"], ["x<", "y", " z"])
    assert disagreement is None and failure is not None


def test_a_one_line_render_diff_keeps_its_minus_and_plus_lines_apart():
    diff = text_diff("<|im_start|>user", "<|im_start|>users")
    lines = diff.splitlines()
    assert "-<|im_start|>user" in lines and "+<|im_start|>users" in lines


def record(stage: str, outcome: str, model: str = "m") -> GateRecord:
    return GateRecord(stage, model, outcome, f"{stage}-{outcome}", "why")


def test_a_row_answered_only_by_refusals_and_errors_fails_the_run():
    records = [record("encode", "refused"), record("encode", "error"), record("split", "pass")]
    (problem,) = run_verdict(records)
    assert problem.startswith("encode · m: no case passed; 1 refused, 1 errors")


def test_refusals_beside_passes_and_n_a_rows_do_not_fail_the_run():
    records = [record("encode", "refused"), record("encode", "pass"), record("logits/exact", "n/a")]
    assert run_verdict(records) == []


def test_a_run_in_which_nothing_passed_fails():
    problems = run_verdict([record("encode", "n/a"), record("split", "reference-disagreement")])
    assert problems == [
        "no case passed in the whole run (1 n/a, 1 reference-disagreement): nothing was shown to conform"
    ]


def test_the_headline_counts_the_coverage_and_refusals_group():
    records = [record("encode", "refused"), record("encode", "refused"), record("encode", "pass")]
    assert headline(records).startswith("coverage: 3 cases gated — 1 passed, 0 failed, 2 refused")
    ((message, group),) = refusal_groups(records)
    assert message == "why" and len(group) == 2


def test_the_answer_cache_computes_each_answer_once_and_remembers_refusals_not_crashes():
    cache, calls = AnswerCache(size=2), []

    def compute(value):
        def run():
            calls.append(value)
            if value == "refuse":
                raise Refused("refused")
            if value == "crash":
                raise EngineError("crashed")
            return value

        return run

    assert cache.get(("a",), compute("a")) == "a" and cache.get(("a",), compute("a")) == "a"
    for _ in range(2):
        with pytest.raises(Refused):
            cache.get(("r",), compute("refuse"))
        with pytest.raises(EngineError):
            cache.get(("c",), compute("crash"))
    assert calls == ["a", "refuse", "crash", "crash"]
