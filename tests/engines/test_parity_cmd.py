"""The parity run end to end through ``--impl 'cmd:...'``: the gate suite in a
subprocess, the engine a real external process that crashes or hangs once.

Acceptance: a crash or a hang costs exactly the case in flight (an ``error``
outcome), the engine is restarted, every other case still runs and passes, the
report files are complete, and the exit status is non-zero when a gate fails or
errors — or when a declared stage is left unanswered (a missing field fails).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from impl.process import lifeline
from specgate.plugin import model_missing
from specgate.supply import models as model_cache
from tests.engines.parity_run import run_parity

ROOT = Path(__file__).resolve().parents[2]
FAULT_ENGINE = Path(__file__).with_name("fault_engine.py")
# The metadata stage is quick; two models give a second request to break.
MODELS = ["qwen2.5-coder-0.5b-instruct", "qwen3-vocab"]


@pytest.fixture(scope="module", autouse=True)
def _models_cached() -> None:
    missing = [m for m in MODELS if m not in model_cache.cached_models()]
    if missing:
        model_missing(f"{missing}; run: specgate models fetch")


def run_gates(
    tmp_path: Path, impl: str, *extra: str, env: dict[str, str] | None = None
) -> tuple[int, dict, str]:
    reports = tmp_path / "reports"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "specgate/gates/test_metadata.py",
        "-p",
        "no:cacheprovider",
        "-q",
        "--impl",
        impl,
        "--models",
        ",".join(MODELS),
        "--stages",
        "metadata",
        "--report-dir",
        str(reports),
        "--junitxml",
        str(reports / "junit.xml"),
        *extra,
    ]
    proc = lifeline.run(  # dies with pytest, and its engines with it
        cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, **(env or {})}
    )
    (report,) = reports.glob("parity-*.json")
    return proc.returncode, json.loads(report.read_text(encoding="utf-8")), proc.stdout + proc.stderr


def fault_impl(target: str = "oracle") -> str:
    return "cmd:" + shlex.join([sys.executable, str(FAULT_ENGINE), target])


def outcomes(report: dict) -> dict[str, int]:
    counts: dict[str, int] = {}
    for case in report["cases"]:
        counts[case["outcome"]] = counts.get(case["outcome"], 0) + 1
    return counts


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict, str]:
    return run_gates(tmp_path_factory.mktemp("clean"), fault_impl())


def test_clean_run_through_cmd_passes_like_the_oracle(clean) -> None:
    status, report, out = clean
    assert status == 0, out[-3000:]
    assert set(outcomes(report)) == {"pass"}
    assert {(row["stage"], row["model"]) for row in report["matrix"]} == {("metadata", m) for m in MODELS}


@pytest.mark.parametrize(
    ("fault", "env", "symptom"),
    [
        ("die", {}, "exited (or closed stdout) before answering request 2 (metadata) (exit status 3)"),
        pytest.param(  # a deadline every real answer meets on a saturated machine (one case's error)
            "hang",
            {"SPECGATE_CMD_TIMEOUT": "20"},
            "no answer to request 2 (metadata) within 20 s (hang; killed)",
            marks=pytest.mark.slow,  # 20 s of it is the deadline (test_cmd's hang test is fast)
        ),
    ],
)
def test_engine_breaking_mid_run_costs_one_case_and_the_run_completes(
    clean, tmp_path: Path, fault: str, env: dict[str, str], symptom: str
) -> None:
    env = {
        "SPECGATE_FAULT": fault,
        "SPECGATE_FAULT_AT": "2",
        "SPECGATE_FAULT_ONCE": str(tmp_path / "fired"),
        **env,
    }
    status, report, out = run_gates(tmp_path, fault_impl(), env=env)
    assert status == 1, out[-3000:]
    counts = outcomes(report)
    assert counts == {"error": 1, "pass": len(clean[1]["cases"]) - 1}, counts
    (error,) = [c for c in report["cases"] if c["outcome"] == "error"]
    assert symptom in error["message"] and f"injecting '{fault}'" in error["message"]
    assert error["model"] == MODELS[1]  # the second model's first case, the second request
    # The report is complete: every case of the clean run is there, and the markdown names the error.
    assert sorted(c["nodeid"] for c in report["cases"]) == sorted(c["nodeid"] for c in clean[1]["cases"])
    markdown = next((tmp_path / "reports").glob("parity-*.md")).read_text(encoding="utf-8")
    assert "### error: metadata" in markdown and symptom in markdown
    suite = ET.parse(tmp_path / "reports" / "junit.xml").getroot().find("testsuite")
    assert suite is not None and int(suite.get("failures", 0)) + int(suite.get("errors", 0)) == 1


def test_a_declared_stage_missing_its_fields_fails_the_run(tmp_path: Path) -> None:
    # The toy engine offers `metadata` but reports none of the gated fields: each fails, named.
    status, report, out = run_gates(tmp_path, fault_impl("toy"))
    assert status == 1, out[-3000:]
    assert set(outcomes(report)) == {"fail"}
    assert all("its answer has no" in c["message"] for c in report["cases"])


def test_k_and_models_select_subsets(tmp_path: Path) -> None:
    status, report, out = run_gates(tmp_path, fault_impl(), "-k", "qwen3-vocab and architecture")
    assert status == 0, out[-3000:]
    assert [(c["model"], c["nodeid"].rsplit("/", 1)[-1]) for c in report["cases"]] == [
        ("qwen3-vocab", "architecture]")
    ]


@pytest.mark.parametrize(
    "workers",
    [  # two workers start three interpreters (~5-7 s): the slow tier's
        pytest.param([], id="one process"),
        pytest.param(["-n", "2", "--dist", "loadfile"], id="two xdist workers", marks=pytest.mark.slow),
    ],
)
def test_an_engine_that_exits_at_once_fails_the_run_with_its_reason(
    tmp_path: Path, workers: list[str]
) -> None:
    """Nothing answered is never green: in one process the run stops with one line; under
    xdist (whose workers cannot stop the run) every case errors with the same line, no
    INTERNALERROR."""
    impl = "cmd:" + shlex.join([sys.executable, "-c", "import sys; sys.exit(3)"])
    run = run_parity(tmp_path, impl, "split", "qwen3-vocab", *workers, timeout=300)
    assert run.status != 0, run.output[-2000:]
    assert "did not start" in run.output and "INTERNALERROR" not in run.output, run.output[-2000:]
