"""Verdicts that cannot be had for free: each engine in ``tests/engines/holes/`` is
a real external process exploiting one way a run could turn green while nothing
was shown to conform. Each must make the parity run exit non-zero with a message
naming the cause; the oracle served through ``cmd:`` stays green on the same gates.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specgate.plugin import model_missing
from specgate.supply import models as model_cache
from tests.engines.parity_run import run_parity, script_impl

HOLES = Path(__file__).with_name("holes")
VOCAB = "qwen3-vocab"
TINY = "tiny-qwen2-f32"


def need(*models: str) -> None:
    cached = {*model_cache.cached_models(), *model_cache.cached_tiny_models()}
    missing = [m for m in models if m not in cached]
    if missing:
        model_missing(f"{missing}; run: specgate models fetch / specgate models tiny")


def test_an_engine_refusing_everything_fails_the_run(tmp_path: Path) -> None:
    need(VOCAB)
    run = run_parity(tmp_path, script_impl(HOLES / "refuse_everything.py"), "split,encode,decode", VOCAB)
    assert run.status == 1, run.output[-3000:]
    assert set(run.outcomes()) == {"refused"}, run.outcomes()  # every case is asked, disputed ones too
    assert "RUN FAILS — no case passed in the whole run" in run.output
    for stage in ("split", "encode", "decode"):
        assert f"RUN FAILS — {stage} · {VOCAB}: no case passed" in run.output
    assert any("no case passed in the whole run" in v for v in run.report["verdict"]["reasons"])
    markdown = next((tmp_path / "reports").glob("parity-*.md")).read_text(encoding="utf-8")
    assert "## Refusals, grouped by message" in markdown and "this engine supports nothing" in markdown


def test_strict_makes_every_refusal_a_failure(tmp_path: Path) -> None:
    need(VOCAB)
    run = run_parity(
        tmp_path, script_impl(HOLES / "refuse_everything.py"), "decode", VOCAB, "--strict", "-k", "ascii"
    )
    assert run.status == 1, run.output[-3000:]
    counts = run.outcomes()
    assert set(counts) == {"fail"} and counts["fail"] >= 1, counts
    assert all(c["message"].startswith("refusal under --strict") for c in run.report["cases"])


def test_an_empty_metadata_answer_fails_every_field_by_name(tmp_path: Path) -> None:
    need(VOCAB)
    run = run_parity(tmp_path, script_impl(HOLES / "empty_metadata.py"), "metadata", VOCAB)
    assert run.status == 1, run.output[-3000:]
    cases = [c for c in run.report["cases"] if c["outcome"] != "reference-disagreement"]
    assert cases and {c["outcome"] for c in cases} == {"fail"}, run.outcomes()
    for case in cases:
        field = case["nodeid"].rsplit("/", 1)[-1].rstrip("]")
        assert f"its answer has no {field!r}" in case["message"], case["message"]


def test_a_crash_on_a_refused_template_is_an_error_not_a_refusal(tmp_path: Path) -> None:
    need(VOCAB)
    run = run_parity(tmp_path, script_impl(HOLES / "crash_on_refused_template.py"), "render", f"{VOCAB}")
    assert run.status == 1, run.output[-3000:]
    errors = [c for c in run.report["cases"] if c["outcome"] == "error"]
    # Exactly the cases transformers refuses (2 conversations of qwen3-vocab, 1 construct).
    assert len(errors) == 3, run.outcomes()
    assert all("exited (or closed stdout) before answering" in c["message"] for c in errors), errors
    assert set(run.outcomes()) == {"pass", "error"}, run.outcomes()


@pytest.mark.slow
def test_a_quantized_engine_claiming_exact_fails_the_exact_rows(tmp_path: Path) -> None:
    need(TINY)
    run = run_parity(
        tmp_path,
        script_impl(HOLES / "quantized_claims_exact.py"),
        "logits",
        TINY,
        "-k",
        "not long_code_512",
        "--shrink-budget",
        "0",  # the forwards counted are the gates'; shrinking a reproducer would add its own,
        "--diagnose-budget",
        "0",  # and so would diagnosing the failing rows (the engine is asked again)
        env={"SPECGATE_LOGITS_LOG": str(tmp_path / "forwards.log")},
    )
    assert run.status == 1, run.output[-3000:]
    quantized, exact = run.outcomes("logits/quantized"), run.outcomes("logits/exact")
    assert set(quantized) == {"pass"} and exact == {"fail": quantized["pass"]}, (quantized, exact)
    # One forward per prompt, however many classes read it.
    forwards = (tmp_path / "forwards.log").read_text().splitlines()
    assert len(forwards) == quantized["pass"], forwards
    exact = next(c for c in run.report["cases"] if c["stage"] == "logits/exact")
    assert "max |Δlogit|" in exact["message"] and "> tolerance 0.0003" in exact["message"]


@pytest.mark.slow
def test_the_same_engine_claiming_only_quantized_is_green_with_exact_na(tmp_path: Path) -> None:
    need(TINY)
    run = run_parity(
        tmp_path,
        script_impl(HOLES / "quantized_claims_exact.py", "--claim", "quantized"),
        "logits",
        TINY,
        "-k",
        "not long_code_512",
    )
    assert run.status == 0, run.output[-3000:]
    quantized, exact = run.outcomes("logits/quantized"), run.outcomes("logits/exact")
    assert set(quantized) == {"pass"} and exact == {"n/a": quantized["pass"]}, (quantized, exact)
    na = next(c for c in run.report["cases"] if c["stage"] == "logits/exact")
    assert "does not claim the 'exact' conformance class" in na["message"]


def test_the_oracle_through_cmd_stays_green_on_the_same_gates(tmp_path: Path) -> None:
    need(VOCAB)
    run = run_parity(tmp_path, "cmd:specgate engine --impl oracle", "metadata,render,decode", VOCAB)
    assert run.status == 0, run.output[-3000:]
    assert set(run.outcomes()) <= {"pass", "reference-disagreement"}, run.outcomes()
