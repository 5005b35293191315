"""Reports survive answers UTF-8 cannot hold: lone surrogates an engine sent in JSON are
written as their ``\\uXXXX`` escapes (``specgate.safe_io.files``), the JSON report reads back to
the engine's very strings and the run's verdict is the cases' (fail), not a crash."""

from __future__ import annotations

from pathlib import Path

from tests.engines.parity_run import run_parity, script_impl

ENGINE = Path(__file__).parents[1] / "engines" / "holes" / "half_surrogates.py"


def test_a_run_with_lone_surrogates_in_answers_writes_its_reports(tmp_path: Path) -> None:
    impl = script_impl(ENGINE)
    run = run_parity(
        tmp_path, impl, "split,render", "qwen3-vocab", "--max-cases", "3", "--shrink-budget", "0"
    )
    assert "Traceback" not in run.output, run.output[-3000:]
    assert run.status == 1, run.output[-3000:]
    assert run.outcomes("split") == {"fail": 3}, run.report.get("matrix")
    assert run.outcomes("render") == {"fail": 6}, run.report.get("matrix")  # model and constructs
    for name in ("md", "html"):
        (written,) = (tmp_path / "reports").glob(f"parity-*.{name}")
        assert "\\ud83d" in written.read_text(encoding="utf-8")
