"""Ctrl-C during a parity run, as a user presses it: a real pytest run gating a slow,
wrong ``cmd:`` engine, sent SIGINT once (the run stops gating, shrinks nothing — with a
shrink budget of 10 minutes it would otherwise start a new engine and shrink — writes
its report marked INTERRUPTED for what was gated, and exits 130) or twice (the second
exits at once, 130, one line, no traceback and no report)."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from specgate.plugin import model_missing
from specgate.reports.parity_report import report_stem
from specgate.supply import models as model_cache

ROOT = Path(__file__).resolve().parents[2]
ENGINE = f"cmd:{sys.executable} tests/engines/slow_engine.py"
MODEL = "qwen3-vocab"
GATED_BEFORE_CTRL_C = 3
# Seconds from Ctrl-C to exit: only a hang guard, far below the 3600 s shrink budget a
# run that kept shrinking would spend (that no reproducer was shrunk is asserted on the
# report, not timed). Measured: ~10 s quiet; 90 s was exceeded at load 35.
CEILING = 600
SHRINK_BUDGET = "3600"


@pytest.fixture(scope="module", autouse=True)
def vocab() -> None:
    if MODEL not in model_cache.cached_models():
        model_missing(f"{MODEL}; run: specgate models fetch")


def start(report_dir: Path, *extra: str, **env: str) -> tuple[subprocess.Popen[str], queue.Queue[str]]:
    cmd = [
        sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-v",
        "specgate/gates/test_tokenizer.py", "-k", "split", "--impl", ENGINE, "--model", MODEL,
        "--report-dir", str(report_dir), "--shrink-budget", SHRINK_BUDGET, "--shrink-group-budget", SHRINK_BUDGET, *extra,
    ]  # fmt: skip
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **env}
    )
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        with contextlib.suppress(ValueError):  # the test closed the pipe (communicate) first
            for line in proc.stdout:
                lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    return proc, lines


def wait_for_gated_cases(
    proc: subprocess.Popen[str], lines: queue.Queue[str], n: int, until: str = ""
) -> list[str]:
    """Read the run's output until ``n`` gate cases have an outcome (and a line holds ``until``)."""
    seen, done, deadline = [], 0, time.monotonic() + CEILING
    while done < n or (until and until not in seen[-1]):
        try:
            line = lines.get(timeout=max(deadline - time.monotonic(), 0.1))
        except queue.Empty:
            proc.kill()
            pytest.fail(f"no {n} gated cases within {CEILING} s: {''.join(seen)[-3000:]}")
        seen.append(line)
        done += "::test_split[" in line and (" FAILED" in line or " PASSED" in line)
    return seen


def finish(proc: subprocess.Popen[str], lines: queue.Queue[str]) -> tuple[int, str, str]:
    try:
        _, err = proc.communicate(timeout=CEILING)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"the run did not end within {CEILING} s of Ctrl-C")
    time.sleep(0.2)
    out = []
    while not lines.empty():
        out.append(lines.get())
    return proc.returncode, "".join(out), err


def interrupted_report(proc: subprocess.Popen[str], lines: queue.Queue[str], reports: Path) -> dict:
    """After one Ctrl-C: the run exits 130 without a traceback; its JSON report."""
    code, out, err = finish(proc, lines)
    assert code == 130, f"exit {code}\n{out[-3000:]}\n{err[-3000:]}"
    assert "Traceback" not in err, err[-3000:]
    stem = reports / report_stem(ENGINE, None)
    return json.loads(stem.with_name(stem.name + ".json").read_text(encoding="utf-8"))


def test_one_ctrl_c_stops_the_run_with_a_report_marked_interrupted(tmp_path):
    reports = tmp_path / "reports"
    proc, lines = start(reports)
    wait_for_gated_cases(proc, lines, GATED_BEFORE_CTRL_C)
    proc.send_signal(signal.SIGINT)
    payload = interrupted_report(proc, lines, reports)
    gated = payload["cases"]
    assert len(gated) >= GATED_BEFORE_CTRL_C and all(c["outcome"] == "fail" for c in gated), gated[:3]
    [interrupted] = [v for v in payload["verdict"]["reasons"] if v.startswith("INTERRUPTED")]
    assert f"after {len(gated)} gate case(s)" in interrupted, interrupted
    stem = reports / report_stem(ENGINE, None)
    for suffix in (".md", ".html"):
        shown = re.sub(r"\\(.)", r"\1", stem.with_name(stem.name + suffix).read_text(encoding="utf-8"))
        assert "INTERRUPTED (Ctrl-C)" in shown  # as Markdown shows it (its text is escaped)
    assert payload["groups"] and all(g["reproducer"] is None for g in payload["groups"])
    assert all("interrupted" in g["shrink_note"] for g in payload["groups"]), payload["groups"]
    assert not list((reports / "repro").rglob("*.json")), "a reproducer was shrunk after Ctrl-C"


@pytest.mark.slow  # a parity run and an engine lingering on close (~4-5 s)
def test_a_second_ctrl_c_exits_at_once(tmp_path):
    """The first Ctrl-C's way out passes through closing the engine, which this one makes
    last (it lingers after its stdin closes, until the client kills it): the second Ctrl-C
    arrives then, and the run leaves at once — no report, no traceback, one line."""
    reports = tmp_path / "reports"
    proc, lines = start(reports, SLOW_ENGINE_LINGER="120")
    wait_for_gated_cases(proc, lines, GATED_BEFORE_CTRL_C)
    proc.send_signal(signal.SIGINT)
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    code, out, err = finish(proc, lines)
    assert code == 130, f"exit {code}\n{out[-3000:]}\n{err[-3000:]}"
    assert "interrupted twice: exiting at once" in err and "Traceback" not in err + out, err[-3000:]
    assert not reports.exists() or not list(reports.rglob("parity-*")), list(reports.rglob("*"))


@pytest.mark.slow  # a parity run, then shrinking against a new engine (~7 s)
def test_a_ctrl_c_while_shrinking_stops_it_with_a_report(tmp_path):
    """Every case gated (3 of them), the matrix printed, the shrinking of the one root cause
    under way against a new engine (0.5 s a check, 3600 s of budget): Ctrl-C stops it, the
    report is written marked INTERRUPTED, no reproducer, exit 130."""
    reports = tmp_path / "reports"
    proc, lines = start(reports, "--max-cases", "3")
    wait_for_gated_cases(proc, lines, 3, until="specgate parity matrix")
    time.sleep(3.0)  # the matrix is printed just before the shrinking starts its engine
    proc.send_signal(signal.SIGINT)
    payload = interrupted_report(proc, lines, reports)
    assert len(payload["cases"]) == 3
    reasons = payload["verdict"]["reasons"]
    assert any(v.startswith("INTERRUPTED (Ctrl-C) while") for v in reasons), reasons
    assert all(g["reproducer"] is None for g in payload["groups"]), payload["groups"]
    assert not list((reports / "repro").rglob("*.json")), "a reproducer was written after Ctrl-C"


@pytest.mark.slow  # a parity run interrupted late (~4-5 s); one Ctrl-C and SIGTERM stay fast
def test_a_ctrl_c_while_the_fresh_engine_closes_still_writes_the_report(tmp_path):
    """The moments around diagnosing and shrinking — importing the diagnoses, closing the
    engine they asked (the gate's own process, reused) — are interrupted like the rest. At
    load 35 the Ctrl-C of the test above landed in ``triage.examine``'s import: a traceback
    and exit -2, no report. Here the SIGINT comes from the engine itself, sent to the run
    once it is told to shut down (its only start: the gate's engine, which the diagnosis
    reused), so it lands while the run closes it, whatever the machine's load."""
    reports = tmp_path / "reports"
    proc, lines = start(
        reports, "--max-cases", "3", "--shrink-budget", "0",
        SLOW_ENGINE_STARTS=str(tmp_path / "starts"), SLOW_ENGINE_SIGINT_AT_CLOSE="1", SLOW_ENGINE_LINGER="60",
        SLOW_ENGINE_DELAY="0.05",
    )  # fmt: skip
    code, out, err = finish(proc, lines)
    assert code == 130, f"exit {code}\n{out[-3000:]}\n{err[-3000:]}"
    assert "Traceback" not in err + out, err[-3000:]
    assert (
        len((tmp_path / "starts").read_text(encoding="utf-8").splitlines()) == 1
    )  # the run's, reused by the diagnosis
    stem = reports / report_stem(ENGINE, None)
    payload = json.loads(stem.with_name(stem.name + ".json").read_text(encoding="utf-8"))
    assert len(payload["cases"]) == 3
    reasons = payload["verdict"]["reasons"]
    assert any(v.startswith("INTERRUPTED (Ctrl-C) while") for v in reasons), reasons
    assert all(g["reproducer"] is None for g in payload["groups"]), payload["groups"]


def reports_written(reports: Path) -> dict:
    """The Markdown, HTML and JSON reports exist; the JSON's payload."""
    stem = reports / report_stem(ENGINE, None)
    for suffix in (".md", ".html"):
        assert stem.with_name(stem.name + suffix).exists(), sorted(reports.rglob("*"))
    return json.loads(stem.with_name(stem.name + ".json").read_text(encoding="utf-8"))


def test_sigterm_mid_run_writes_the_reports(tmp_path):
    """SIGTERM (a cancelled CI job) stops the run as a first Ctrl-C does: the reports for
    what was gated, marked INTERRUPTED (SIGTERM), exit 143 (issue 38: none was written)."""
    reports = tmp_path / "reports"
    proc, lines = start(reports)
    wait_for_gated_cases(proc, lines, GATED_BEFORE_CTRL_C)
    proc.send_signal(signal.SIGTERM)
    code, out, err = finish(proc, lines)
    assert code == 143, f"exit {code}\n{out[-3000:]}\n{err[-3000:]}"
    assert "Traceback" not in err, err[-3000:]
    payload = reports_written(reports)
    assert len(payload["cases"]) >= GATED_BEFORE_CTRL_C
    assert any(r.startswith("INTERRUPTED (SIGTERM) after") for r in payload["verdict"]["reasons"])


@pytest.mark.slow  # waits out an engine hanging on its first request (~10 s)
def test_ctrl_c_while_the_first_request_hangs_writes_the_reports(tmp_path):
    """Ctrl-C before any case was gated (the engine's first answer takes an hour): the
    reports are still written, saying the run was interrupted after 0 cases (issue 38:
    none was written)."""
    reports, starts = tmp_path / "reports", tmp_path / "starts"
    proc, lines = start(reports, SLOW_ENGINE_DELAY="3600", SLOW_ENGINE_STARTS=str(starts))
    deadline = time.monotonic() + CEILING
    while not starts.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert starts.exists(), "the engine never started"
    time.sleep(3.0)  # its handshake and the first request (or, on a stalled machine, its start-up)
    proc.send_signal(signal.SIGINT)
    code, out, err = finish(proc, lines)
    assert code == 130, f"exit {code}\n{out[-3000:]}\n{err[-3000:]}"
    assert "Traceback" not in err, err[-3000:]
    payload = reports_written(reports)
    assert payload["cases"] == []
    assert any(
        r.startswith("INTERRUPTED (Ctrl-C) after 0 gate case(s)") for r in payload["verdict"]["reasons"]
    )
