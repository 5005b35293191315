"""Run the gate suite as ``nox -s parity`` does — ``specgate parity`` in a subprocess (or
pytest over some gate modules of ``specgate/gates``), the engine a real external process —
and read back its exit status, JSON report and output."""

from __future__ import annotations

import json
import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from impl.process import lifeline

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class ParityRun:
    status: int
    report: dict[str, Any]
    output: str
    peak_bytes: int | None = None  # the run's peak resident size, when measured
    own_peak_bytes: int | None = None  # the gate's own process's peak (not its engines'), when measured
    own_peaks: dict[str, int] | None = None  # its sampled peaks by part (``peak_rss.py``): anon, file, pss
    report_bytes: int = 0  # the JSON report's size on disk

    def outcomes(self, stage: str | None = None) -> dict[str, int]:
        counts: dict[str, int] = {}
        for case in self.report["cases"]:
            if stage is None or case["stage"] == stage:
                counts[case["outcome"]] = counts.get(case["outcome"], 0) + 1
        return counts


def script_impl(script: Path, *args: str) -> str:
    """``--impl`` for a Python engine script run with this interpreter."""
    return "cmd:" + shlex.join([sys.executable, str(script), *args])


def run_parity(
    tmp_path: Path,
    impl: str,
    stages: str,
    models: str,
    *extra: str,
    files: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
    timeout: float = 900,
    measure: bool = False,
) -> ParityRun:
    """``specgate parity`` with these options; with ``files`` (gate modules), pytest over
    just those. ``measure``: run it under ``peak_rss.py`` and keep its peak resident size."""
    reports = tmp_path / "reports"
    peak_file = tmp_path / "peak.json"
    wrapper = (
        [sys.executable, str(Path(__file__).with_name("peak_rss.py")), str(peak_file)] if measure else []
    )
    cmd = [
        *wrapper,
        sys.executable,
        "-m",
        *(["pytest", *files, "-p", "no:cacheprovider"] if files else ["specgate", "parity"]),
        "-q",
        "--impl",
        impl,
        "--stages",
        stages,
        "--models",
        models,
        "--report-dir",
        str(reports),
        *extra,
    ]
    proc = lifeline.run(  # tied to us: no orphan engine if this test run is killed
        cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}
    )
    found = sorted(reports.glob("parity-*.json"))
    report = json.loads(found[0].read_text(encoding="utf-8")) if found else {"cases": [], "matrix": []}
    peaks = json.loads(peak_file.read_text(encoding="utf-8")) if measure else {}
    size = found[0].stat().st_size if found else 0
    return ParityRun(
        proc.returncode, report, proc.stdout + proc.stderr, peak_bytes=peaks.get("peak_bytes"),
        report_bytes=size, own_peak_bytes=peaks.get("own_peak_bytes"),
        own_peaks={part: peaks[f"own_peak_{part}_bytes"] for part in ("anon", "file", "pss")} if measure else None,
    )  # fmt: skip


def planted_run(tmp_path: Path, engine: str, defects: str, stages: str, models: str) -> ParityRun:
    """A planted engine of ``tests/engines`` (``engine``: its file name) with ``--defects``,
    gated on ``stages`` as a user would, without shrinking (its groups do not depend on it),
    in one process (its groups need no merging of workers' records)."""
    script = ROOT / "tests" / "engines" / engine
    return run_parity(
        tmp_path,
        script_impl(script, f"--defects={defects}"),
        stages,
        models,
        "--shrink-budget",
        "0",
        "-p",
        "no:xdist",
    )
