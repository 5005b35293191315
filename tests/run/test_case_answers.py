"""The engine's own answer kept per failing case (``specgate.run.case_answers``), bounded
and windowed around the first divergence; where the divergence falls
(``specgate.run.divergence_site``); and undiagnosed failures grouped by it, each group with
its own reproducer (issue 27)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from specgate.outcomes.verdict import GateRecord
from specgate.plugin import model_missing
from specgate.reports.browser import group_heading
from specgate.run import case_answers, signatures
from specgate.run.divergence_site import site
from specgate.supply import models as model_cache
from tests.engines.parity_run import run_parity, script_impl

ENGINES = Path(__file__).resolve().parents[1] / "engines"
MODEL = "qwen3-vocab"


def test_a_20_mb_answer_is_kept_as_a_window_around_its_first_divergence() -> None:
    size = 20 * 1024 * 1024
    reference = "a" * size + "<|im_end|>\n" + "b" * 1000
    engine = "a" * size + "<|im_end|> \n" + "b" * 1000
    kept = case_answers.answers("render", {"prompt": reference}, engine)
    assert kept is not None
    for field in ("engine", "reference", "diff"):
        assert len(kept[field]) <= case_answers.SHOWN_CHARS + 40, (field, len(kept[field]))
    # the window holds the divergence and says how much it left out
    assert (
        "<|im_end|> \n" in kept["engine"]
        and f"[{size + 10 - case_answers.WINDOW_CHARS:,} characters before]" in kept["engine"]
    )
    assert "<|im_end|>\nbbb" in kept["reference"]
    # the diff shows the whitespace: the engine's extra space before the newline
    assert "+" in kept["diff"] and "|>·↵" in kept["diff"], kept["diff"]
    assert kept["site"] == "on a line break mid-text", kept  # the reference's character there


def test_kept_answers_escape_invisible_and_combining_code_points() -> None:
    case = {"text": "cafe\u0301 \x85x", "pieces": ["cafe\u0301", " \x85", "x"]}
    kept = case_answers.answers("split", case, ["café", " ", "\x85x"])
    assert kept is not None
    assert "cafe\\u0301" in kept["reference"] and "\u0301" not in kept["reference"]
    assert "\\x85" in kept["reference"] and "\x85" not in kept["engine"]
    assert kept["engine"].startswith("▶ "), kept["engine"]  # the first piece already differs


def test_a_long_token_list_is_windowed_with_counts() -> None:
    ref = list(range(100_000))
    got = [*range(50_000), -1, *range(50_001, 100_000)]
    kept = case_answers.answers("encode", {"text": "x", "ids": ref}, got)
    assert kept is not None
    lines = kept["engine"].splitlines()
    assert lines[0] == f"… {50_000 - case_answers.WINDOW_ITEMS} before" and lines[-1].endswith("after"), lines
    assert "▶ -1" in kept["engine"] and "▶ 50000" in kept["reference"]
    assert len(lines) == 2 * case_answers.WINDOW_ITEMS + 3


@pytest.mark.parametrize(
    ("reference", "engine", "key"),
    [
        (["if", ":\n", "   ", " x"], ["if", ":\n", "    ", "x"], "in a whitespace run"),
        (["a", " ", "1", "2", "3"], ["a", " ", "123"], "in a number"),
        (["a", " ", "٢", "٣"], ["a", " ", "٢٣"], "in a number"),
        (["don", "'t"], ["don", "'", "t"], "in a contraction"),
        (["x", " café"], ["x", " caf", "é"], "in a space-led word"),
        (["x", "<|im_end|>"], ["x", "<|", "im_end|>"], "in a special token"),
        (["x"], ["x", "y"], "an extra token: a word"),
        (["x", "y", "z"], ["x", "z"], "a missing token: a word"),
    ],
)
def test_the_site_names_the_kind_of_piece_the_divergence_falls_in(reference, engine, key) -> None:
    text = "".join(reference)
    found, shown = site("split", text, reference, engine, None)
    assert found == key and shown.startswith(key), (found, shown)


def test_the_site_of_a_text_names_the_character_and_position() -> None:
    assert site("decode", "abc\n", None, None, None, 3) == (
        "on a line break mid-text",
        "on a newline · at a space/word boundary",
    )
    assert site("render", "ab", None, None, None, 2)[0] == "on the end of the text at the end"
    assert site("decode", "x e\u0301", None, None, None, 3)[1] == "on a combining mark · inside a word"
    assert site("decode", "x ٣", None, None, None, 2)[1] == "on a non-ASCII digit · at a space/word boundary"


def test_the_signature_of_an_undiagnosed_record_adds_its_site() -> None:
    message = "[split] model m, case c: pieces differ from regex at text offset 3 ('a  b')"
    spaces = GateRecord("split", "m", "fail", "a", message, {}, "c", {"site": "in a whitespace run"})
    digits = GateRecord("split", "m", "fail", "b", message, {}, "c", {"site": "in a number"})
    bare = GateRecord("split", "m", "fail", "c", message, {}, "c")
    assert signatures.message_signature(spaces) == signatures.message_signature(digits)
    assert signatures.record_signature(spaces) != signatures.record_signature(digits)
    assert signatures.record_signature(bare) == signatures.message_signature(bare)


@pytest.mark.slow
def test_two_split_bugs_of_one_message_are_two_groups_each_with_its_reproducer(tmp_path: Path) -> None:
    """main: an engine with two split bugs (no whitespace-run lookahead; digits in runs
    of three) gave one split group, one reproducer (the whitespace run's) and no trace
    of the digit bug. Undiagnosed (--diagnose-budget 0), the groups follow where the
    first divergence falls: one group per bug, each shrunk to its own reproducer; the
    failing cases keep the engine's answer, bounded; the headings carry no mask."""
    if MODEL not in model_cache.cached_models():
        model_missing(f"{MODEL}; run: specgate models fetch {MODEL}")
    impl = script_impl(ENGINES / "fixable_tokenizer.py", "--defects=lookahead,digits3")
    run = run_parity(
        tmp_path, impl, "split", MODEL, "--diagnose-budget", "0", "--shrink-group-budget", "600",
        "--shrink-budget", "1200", timeout=1800,
    )  # fmt: skip  # shrinking budgets out of reach: the reproducers' sizes must not depend on load
    assert run.status == 1, run.output[-3000:]
    groups = [g for g in run.report["groups"] if g["outcome"] == "fail"]
    assert sorted(g["where"] for g in groups) == ["in a number", "in a whitespace run"], groups
    repros = {g["where"]: g["reproducer"]["input"]["text"] for g in groups}
    assert re.fullmatch(r" +\S", repros["in a whitespace run"]) and len(repros["in a whitespace run"]) <= 4, (
        repros
    )
    assert all(ch.isnumeric() for ch in repros["in a number"]), repros
    for g in groups:
        heading = group_heading(g)
        assert "<q>" not in heading and "(…)" not in heading and g["where"] in heading, heading
    failing = [c for c in run.report["cases"] if c["outcome"] == "fail"]
    assert failing and all(c["answers"]["engine"] != c["answers"]["reference"] for c in failing)
    assert all(
        "▶" in c["answers"]["engine"] and c["answers"]["diff"].startswith("--- reference") for c in failing
    )
    passing = [c for c in run.report["cases"] if c["outcome"] == "pass"]
    assert passing and not any(c["answers"] for c in passing)
    assert json.loads(json.dumps(run.report["cases"][0]))  # the kept answers are plain JSON


def test_one_token_added_or_left_out_is_named_whatever_follows_it() -> None:
    """An engine adding a BOS diverges at index 0 before every kind of first token: one
    site (main of this branch: a word, a number, a whitespace run... one group each)."""
    for first in (["hello", " world"], ["12", "3"], ["  ", " x"]):
        text = "".join(first)
        assert (
            site("split", text, first, ["<|endoftext|>", *first], None)[0]
            == "an extra token: a special token"
        )
        assert site("split", text, first, first[1:], None)[0].startswith("a missing token: ")
    pieces = {1: b"<|endoftext|>", 2: b"hi", 3: b" there", 4: b"\n"}.__getitem__
    assert site("encode", "hi there", [2, 3], [1, 2, 3], pieces)[0] == "an extra token: a special token"
    assert site("encode", "hi there\n", [2, 3, 4], [2, 3], pieces)[0] == "a missing token: a newline run"
