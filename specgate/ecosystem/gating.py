"""One engine's gate run: ``specgate parity --impl ...`` in a subprocess within its
budget (with its server, per model, when it has one), and its row of the table read back
from the JSON report(s) it wrote."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from impl.process import lifeline
from specgate.ecosystem.confirm import CONFIRM_FLOOR_SECONDS, ConfirmRun, mark, run_confirm
from specgate.ecosystem.install import Install, tail
from specgate.ecosystem.servers import RunProblem, log_tail, running_server
from specgate.ecosystem.spec import ConfirmedGroup, EngineSpec, child_path
from specgate.outcomes import verdict
from specgate.outcomes.gate import OUTCOMES
from specgate.supply.models import PROJECT_ROOT


def gate_command(
    impl: str, stages: list[str], models: list[str], report_dir: Path, extra: list[str], name: str = ""
) -> list[str]:
    """The gate run's command line; ``name`` (a server engine's key) names its report
    files instead of the impl string, which carries the server's port."""
    return [
        sys.executable,
        "-m",
        "specgate",
        "parity",
        "-q",
        "--impl",
        impl,
        "--stages",
        ",".join(stages),
        "--models",
        ",".join(models),
        "--report-dir",
        str(report_dir),
        *(["--report-name", name] if name else []),
        *extra,
    ]


#: Seconds a gate run interrupted at its deadline gets to write its report of the cases so far.
INTERRUPT_GRACE = 20.0


def run_gates(argv: list[str], log: Path, deadline: float, env: dict[str, str]) -> int:
    """The gate run in its own process group; its output goes to ``log``. At the deadline
    it is interrupted (SIGINT: pytest still writes the report of the cases gated so far),
    then killed with everything it started; either way a RunProblem "timeout"."""
    with open(log, "wb") as out:
        proc = lifeline.spawn(argv, cwd=PROJECT_ROOT, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        return proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=INTERRUPT_GRACE)
        raise RunProblem("timeout", "") from None
    finally:
        lifeline.kill_group(proc)  # what the run started and left behind goes too
        proc.wait()


@dataclass
class EngineRun:
    """One engine's row of the table."""

    key: str
    name: str
    package: str
    version: str
    installer: str
    install: Install
    status: str = "not run"  # "ran" | "timeout" | "error" | "unavailable" | "not run"
    message: str = ""
    seconds: float = 0.0
    budget: float = 0.0
    budget_note: str = ""
    #: The peak memory of the runner's process tree while this engine ran (its server, gate
    #: run, engine processes and confirm script; PSS, sampled every 0.2 s), in bytes.
    peak_bytes: int = 0
    reports: list[dict[str, Any]] = field(default_factory=list)
    report_files: list[str] = field(default_factory=list)
    #: The confirm script's run (None: not run) and what it confirms (``confirm.mark``).
    confirm: ConfirmRun | None = None
    confirm_groups: list[ConfirmedGroup] = field(default_factory=list)

    def mark(self, group: dict[str, Any]) -> tuple[str, str]:
        """Whether the engine's own API reproduces ``group`` outside specgate."""
        return mark(group, self.confirm_groups, self.confirm, self.groups())

    def counts(self) -> dict[str, Counter]:
        """Outcome counts per stage, summed over models and report files."""
        out: dict[str, Counter] = {}
        for payload in self.reports:
            for row in payload["matrix"]:
                out.setdefault(row["stage"], Counter()).update({o: row[o] for o in OUTCOMES})
        return dict(sorted(out.items()))

    def groups(self) -> list[dict[str, Any]]:
        """The root-cause groups of all its reports, largest first."""
        found = [g for payload in self.reports for g in payload.get("groups", [])]
        return sorted(found, key=lambda g: -g["count"])

    def verdict(self) -> list[str]:
        return [v for payload in self.reports for v in verdict.rule_problems(payload)]


def run_engine(
    spec: EngineSpec,
    install_result: Install,
    out_dir: Path,
    budget: float,
    *,
    sample: bool = False,
    export_dir: Path | None = None,
    extra: list[str] = (),  # type: ignore[assignment]
    base: Path = PROJECT_ROOT,
) -> EngineRun:
    """Gate one engine (its full table, or with ``sample`` its ``[ci]`` sample) within
    ``budget`` seconds, then (the full table only) run its confirm script when it found
    root causes; never raises for the engine's own trouble. Reproducer files are named
    relative to ``base`` (the folder holding the reports folder)."""
    row = EngineRun(
        spec.key,
        spec.name,
        spec.package,
        spec.version,
        spec.installer,
        install_result,
        budget=budget,
        confirm_groups=list(spec.confirm_groups),
    )
    if install_result.status == "unavailable":
        row.status, row.message = "unavailable", install_result.message
        return row
    models = spec.ci_models if sample else spec.models
    stages = spec.ci_stages if sample else spec.stages
    extra = [*extra, *(["--max-cases", str(spec.ci_max_cases)] if sample else [])]
    engine_dir = out_dir / spec.key
    shutil.rmtree(engine_dir, ignore_errors=True)
    engine_dir.mkdir(parents=True)
    env = {**os.environ, **spec.env, "PATH": child_path()}
    if export_dir is not None:
        env["SPECGATE_EXPORT_DIR"] = str(export_dir)
    start = time.monotonic()
    deadline = start + budget
    # A server serves one model: one server and one gate run per model.
    batches = [[m] for m in models] if spec.server else [models]
    statuses = []
    try:
        for batch in batches:
            statuses.append(gate_batch(spec, stages, batch, engine_dir, deadline, env, extra))
        row.status = "ran"
    except RunProblem as problem:
        row.status, row.message = problem.status, problem.message
    row.seconds = round(time.monotonic() - start, 1)
    unreadable = []
    for path in sorted(engine_dir.glob("**/parity-*.json")):
        try:
            payload = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            unreadable.append(f"{path.relative_to(out_dir)}: {exc} (see its gates.log)")
            continue
        if payload.get("startup_failure"):  # the engine did not start: its reason, no counts
            statuses.append(payload["startup_failure"])
            continue
        row.reports.append(with_short_paths(payload, base))
        row.report_files.append(relative_to(path, base))
    if unreadable and row.status == "ran":
        row.status, row.message = "error", "unreadable report: " + "; ".join(unreadable)
    if row.status == "timeout" and not row.message:
        gated = sum(len(payload["cases"]) for payload in row.reports)
        row.message = f"not finished within its budget of {budget:g} s; stopped" + (
            f": the counts are of the {gated} cases gated before" if gated else ""
        )
    if row.status == "ran" and len(row.reports) < len(batches):
        row.status = "error"
        row.message = "; ".join(s for s in statuses if s) or "the gate run wrote no report"
    if not sample and row.groups():
        left = deadline - time.monotonic()
        row.confirm = run_confirm(spec, max(left, CONFIRM_FLOOR_SECONDS), env)
    return row


def relative_to(path: Path, base: Path) -> str:
    """``path`` named relative to ``base`` when it lies inside it (as the saved table names
    its reports, so a table moved with its reports folder still finds them), else as given."""
    try:
        return str(Path(path).resolve().relative_to(base.resolve()))
    except ValueError:
        return str(path)


def with_short_paths(payload: dict[str, Any], base: Path = PROJECT_ROOT) -> dict[str, Any]:
    """The report with its reproducer files named relative to ``base`` (as the table
    shows them: ``reports/ecosystem/<engine>/repro/...``) when they lie inside it."""
    for group in payload.get("groups", []):
        with contextlib.suppress(TypeError, ValueError):
            group["reproducer_file"] = str(
                Path(group["reproducer_file"]).resolve().relative_to(base.resolve())
            )
    return payload


def gate_batch(
    spec: EngineSpec,
    stages: list[str],
    models: list[str],
    engine_dir: Path,
    deadline: float,
    env: dict[str, str],
    extra: list[str],
) -> str:
    """One gate run over ``models`` (with the engine's server for them, if it has one);
    returns "" or, when it wrote no report, why (its output's tail)."""
    report_dir = engine_dir / "-".join(models) if spec.server else engine_dir
    report_dir.mkdir(parents=True, exist_ok=True)
    log = report_dir / "gates.log"
    with contextlib.ExitStack() as stack:
        values = {}
        if spec.server:
            values["port"] = str(
                stack.enter_context(running_server(spec, models[0], report_dir / "server.log", deadline))
            )
        impl = spec.fill(spec.impl, quote=not spec.impl.startswith("http:"), **values)
        status = run_gates(
            gate_command(impl, stages, models, report_dir, extra, spec.key if spec.server else ""),
            log,
            deadline,
            env,
        )
    if not list(report_dir.glob("parity-*.json")):
        return f"pytest exited {status} without a report: {why_stopped(log)}"
    return ""


def why_stopped(log: Path) -> str:
    """What a gate run that wrote no report said about it: its usage-error or exit lines
    (``ERROR: ...``, ``Exit: ...``), else the tail of its output."""
    text = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
    said = [
        m.group(1).strip(" !")
        for m in re.finditer(r"^(?:ERROR: |! _pytest\.outcomes\.Exit: )(.*)$", text, re.M)
    ]
    return tail("\n".join(said)) if said else log_tail(log)


def sample_problem(row: EngineRun) -> str | None:
    """Why an engine's CI sample run shows a rotten adapter, or None: it must have run
    to the end and answered cases (passed or failed them), not only refused or errored."""
    if row.status != "ran":
        return f"{row.name}: {row.status}: {row.message}"
    counts = Counter()
    for per_stage in row.counts().values():
        counts.update(per_stage)
    answered = counts["pass"] + counts["fail"]
    if not answered:
        return (
            f"{row.name}: no case answered ({', '.join(f'{n} {o}' for o, n in sorted(counts.items())) or 'no cases'}); "
            f"first errors: {'; '.join(g['first_message'].splitlines()[0] for g in row.groups()[:2] if g['first_message'])}"
        )
    return None
