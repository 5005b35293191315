"""A diagnosis cut short by its budget says so (issue 35): the terminal summary and every
report (Markdown, JSON, HTML) give how many failing groups were left undiagnosed and
why; and the diagnosis asks the gate's own engine process, not a second one.

The engine is ``fixable_tokenizer.py --defects=nfc`` (a real ``cmd:`` process) on
qwen3-vocab: a run with the default budget names NFC; with a tiny budget the same
run's reports say the budget ran out and leave the group unnamed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from specgate.plugin import model_missing
from specgate.supply import models as model_cache
from tests.engines.parity_run import run_parity, script_impl

ENGINE = Path(__file__).resolve().parents[1] / "engines" / "fixable_tokenizer.py"
MODEL = "qwen3-vocab"
CUT_SHORT = re.compile(r"diagnosis cut short: (\d+) of (\d+) failing groups? left undiagnosed because the "
                       r"diagnosis budget \(0\.001 s, --diagnose-budget\) ran out")  # fmt: skip

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def vocab() -> None:
    if MODEL not in model_cache.cached_models():
        model_missing(f"{MODEL}; run: specgate models fetch {MODEL}")


def gate(tmp_path: Path, budget: str):
    starts = tmp_path / "starts"
    run = run_parity(
        tmp_path, script_impl(ENGINE, "--defects=nfc"), "split", MODEL, "-k", "combining or ascii",
        "--shrink-budget", "0", "--diagnose-budget", budget, "-p", "no:xdist",
        env={"PLANTED_ENGINE_STARTS": str(starts)},
    )  # fmt: skip
    assert run.status == 1, run.output[-3000:]
    return run, len(starts.read_text(encoding="utf-8").splitlines())


def test_a_diagnosis_cut_short_says_so_in_every_report(tmp_path: Path) -> None:
    run, _ = gate(tmp_path, "0.001")
    assert not [g for g in run.report["groups"] if g["diagnosis"]], "nothing diagnosed in 1 ms"
    failing = [g for g in run.report["groups"] if g["outcome"] == "fail"]
    (note,) = [n for n in run.report["diagnosis_notes"] if CUT_SHORT.search(n)]
    left, of = map(int, CUT_SHORT.search(note).groups())
    assert left == of == len(failing) >= 1, (note, len(failing))
    assert "split · qwen3-vocab" in note
    assert sum(bool(CUT_SHORT.search(line)) for line in run.output.splitlines()) == 1, run.output[-3000:]
    reports = tmp_path / "reports"
    md = re.sub(r"\\(.)", r"\1", next(reports.glob("parity-*.md")).read_text("utf-8"))
    html = next(reports.glob("parity-*.html")).read_text("utf-8")
    assert CUT_SHORT.search(md), md[-3000:]
    assert CUT_SHORT.search(html), "the HTML report says it too"


def test_the_diagnosis_asks_the_gates_engine_process(tmp_path: Path) -> None:
    run, started = gate(tmp_path, "600")
    assert any("normaliz" in g["diagnosis"] for g in run.report["groups"]), run.report["groups"]
    assert not run.report["diagnosis_notes"], run.report["diagnosis_notes"]
    assert started == 1, f"{started} engine processes: the diagnosis started the engine again"
