"""``specgate report diff`` on real runs: one engine gated before and after a change.

The engine (``tests/engines/fixable_tokenizer.py``) is the oracle with defects chosen
on its command line, served as a real ``cmd:`` process. Three runs of the split and
encode gates on qwen3-vocab: with the lookahead defect (before), with none (the fix),
and with the lookahead fixed but NFC normalization planted (a fix that breaks other
cases). Every expected count comes from the runs' own reports, never from the diff.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from specgate.reports import diff as report_diff
from tests.engines.parity_run import run_parity, script_impl

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "tests" / "engines" / "fixable_tokenizer.py"
MODEL = "qwen3-vocab"
BAD = {"fail", "error"}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = {}
    for name, defects in {"before": "lookahead", "fixed": "", "other": "nfc"}.items():
        tmp = tmp_path_factory.mktemp(name)
        run = run_parity(
            tmp, script_impl(ENGINE, f"--defects={defects}"), "split,encode", MODEL, "--shrink-budget", "0"
        )
        assert run.report["cases"], run.output[-3000:]
        (found,) = sorted((tmp / "reports").glob("parity-*.json"))
        out[name] = found
    return out


def outcomes(path: Path) -> dict[str, str]:
    return {c["nodeid"]: c["outcome"] for c in json.loads(path.read_text(encoding="utf-8"))["cases"]}


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specgate.cli", "report", "diff", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_a_fix_is_newly_passing_and_exits_zero(runs: dict[str, Path]) -> None:
    before, fixed = outcomes(runs["before"]), outcomes(runs["fixed"])
    failing_before = {n for n, o in before.items() if o in BAD}
    assert failing_before, "the planted defect must fail some cases"
    assert not {n for n, o in fixed.items() if o in BAD}, "the fixed engine is the oracle"
    proc = cli(str(runs["before"]), str(runs["fixed"]))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"fixed {len(failing_before)}, broke 0" in proc.stdout
    assert "nothing newly fails" in proc.stdout


def test_the_reverse_is_newly_failing_and_exits_one(runs: dict[str, Path], tmp_path: Path) -> None:
    before = outcomes(runs["before"])
    failing = sorted(n for n, o in before.items() if o in BAD)
    summary = tmp_path / "comment.md"
    proc = cli(str(runs["fixed"]), str(runs["before"]), "--markdown", str(summary))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"fixed 0, broke {len(failing)}" in proc.stdout
    assert "### Newly failing" in proc.stdout
    assert sum(n in proc.stdout for n in failing) == min(len(failing), report_diff.SHOWN)
    assert summary.read_text(encoding="utf-8") == proc.stdout


def test_a_fix_that_breaks_something_else(runs: dict[str, Path]) -> None:
    before, other = outcomes(runs["before"]), outcomes(runs["other"])
    fixed_now = {n for n, o in before.items() if o in BAD and other.get(n) == "pass"}
    broke_now = {n for n, o in other.items() if o in BAD and before.get(n) not in BAD}
    still = {n for n, o in other.items() if o in BAD and before.get(n) in BAD}
    assert fixed_now and broke_now, "the runs must differ both ways for this test to mean anything"
    result = report_diff.diff(*(report_diff.read_report(runs[k]) for k in ("before", "other")))
    assert {c.nodeid for c in result.newly_passing} == fixed_now
    assert {c.nodeid for c in result.newly_failing} == broke_now
    # a case failing in both runs with another first divergence is a changed message
    assert {c.nodeid for c in result.changed_messages} <= still
    proc = cli(str(runs["before"]), str(runs["other"]))
    assert proc.returncode == 1
    assert f"fixed {len(fixed_now)}, broke {len(broke_now)}" in proc.stdout


@pytest.mark.parametrize(
    "content", [b"\xff\xfe not utf-8", b"[1, 2]", b'{"cases": [{"outcome": 5}]}', b"[" * 100_000]
)
def test_a_file_that_is_not_a_report_is_one_line_and_exit_4(
    runs: dict[str, Path], tmp_path: Path, content: bytes
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    proc = cli(str(runs["fixed"]), str(bad))
    assert proc.returncode == 4
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_another_first_divergence_is_a_changed_message(runs: dict[str, Path]) -> None:
    """The before run against itself with one failing case's message edited (as a change
    to the engine that moves the first divergence would): exactly that case changed."""
    old = report_diff.read_report(runs["before"])
    new = json.loads(json.dumps(old))
    case = next(c for c in new["cases"] if c["outcome"] in BAD)
    case["message"] = case["message"] + " (elsewhere)"
    result = report_diff.diff(old, new)
    assert [c.nodeid for c in result.changed_messages] == [case["nodeid"]]
    assert not result.newly_failing and not result.newly_passing and not result.regressed
    assert "### Changed messages (1)" in report_diff.markdown(result)
