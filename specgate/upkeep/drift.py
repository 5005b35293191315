"""The drift watch: what would newer references change? ``reports/reference-drift.md``.

``nox -s references-latest`` installs the newest releases of the references
(unpinned; torch stays at its CPU build), runs the reference re-checks
(``tests/references --live-references``, without ``--record-references``) with this
module loaded as a pytest plugin (``-p specgate.upkeep.drift --drift-report PATH``), and
always exits 0 once the report is written: it watches, it never gates CI.

A re-check that finds a drift leaves it on its test item as data
(``specgate.upkeep.snapshots.note_drift``: model, stage, the packages that stage records,
added / removed / changed cases, each change's first divergence). This plugin
gathers those and the failures that are not drifts (a reference that no longer
loads, a model missing) and writes, per reference, the locked version against the
one tried, then per model and stage which cases changed and how.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from specgate.upkeep import lock
from specgate.upkeep.snapshots import DRIFT_PROPERTY

MAX_CASES_LISTED = 25


@dataclass
class DriftRun:
    drifts: list[dict[str, Any]] = field(default_factory=list)
    broken: list[tuple[str, str]] = field(default_factory=list)  # (test id, first line of its failure)
    passed: int = 0
    skipped: int = 0


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("specgate").addoption(
        "--drift-report",
        default=None,
        help="write the reference-drift report (locked vs tried versions, changed re-check cases) here",
    )


def pytest_configure(config: pytest.Config) -> None:
    target = config.getoption("--drift-report")
    if target:
        config.pluginmanager.register(DriftCollector(Path(target)), "specgate-drift-collector")


def first_error_line(report: pytest.TestReport) -> str:
    """The failure's own message (the last ``E`` line pytest shows), without the traceback."""
    lines = report.longreprtext.strip().splitlines()
    errors = [line.removeprefix("E").strip() for line in lines if line.startswith("E ")]
    return (errors[0] if errors else lines[-1] if lines else "")[:300]


class DriftCollector:
    """Gathers the re-check outcomes of one run and writes the report at its end."""

    def __init__(self, target: Path) -> None:
        self.target = target
        self.run = DriftRun()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" and report.passed:
            self.run.passed += 1
        elif report.skipped:
            self.run.skipped += 1
        if not report.failed:
            return
        drifts = [value for key, value in report.user_properties if key == DRIFT_PROPERTY]
        if drifts:
            self.run.drifts.extend(drifts)
        else:
            self.run.broken.append((report.nodeid, first_error_line(report)))

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self.target.parent.mkdir(parents=True, exist_ok=True)
        self.target.write_text(render(self.run), encoding="utf-8")

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        terminalreporter.write_line(f"reference drift report: {self.target}")


# ---------------------------------------------------------------------------
# the report


def _tried(name: str) -> str:
    return lock.installed(name) or "not installed"


def _versions_table(run: DriftRun) -> list[str]:
    try:
        pins = lock.locked()
    except lock.LockError as exc:
        pins = {}
        note = [f"(the lock could not be read: {exc})", ""]
    else:
        note = []
    lines = [
        *note,
        "| reference | locked | tried | re-check stages that changed |",
        "|---|---|---|---|",
    ]
    for name in lock.REFERENCES:
        locked_version = pins.get(lock.canonical(name), "not locked")
        tried = _tried(name)
        stages = sorted({f"{d['model']}/{d['stage']}" for d in run.drifts if name in d.get("packages", ())})
        moved = "same" if lock.same_release(locked_version, lock.installed(name)) else "**differs**"
        lines.append(
            f"| {name} | {locked_version} | {tried} ({moved}) | {', '.join(stages) if stages else '—'} |"
        )
    return [*lines, ""]


def _drift_section(drift: dict[str, Any]) -> list[str]:
    lines = [
        f"### {drift['model']} / {drift['stage']}",
        "",
        f"References recorded for this stage: {', '.join(drift.get('packages', [])) or '?'}; "
        f"{len(drift['changed'])} of {drift.get('cases', '?')} cases changed, "
        f"{len(drift['added'])} added, {len(drift['removed'])} removed.",
        "",
    ]
    for case, why in list(drift["changed"].items())[:MAX_CASES_LISTED]:
        lines.append(f"- `{case}`: " + str(why).replace("\n", " ").strip())
    if len(drift["changed"]) > MAX_CASES_LISTED:
        lines.append(f"- … and {len(drift['changed']) - MAX_CASES_LISTED} more")
    for kind in ("added", "removed"):
        if drift[kind]:
            lines.append(f"- case ids {kind}: {', '.join(drift[kind][:MAX_CASES_LISTED])}")
    return [*lines, ""]


def render(run: DriftRun) -> str:
    when = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    verdict = (
        "No re-check case changed: the newest releases agree with the committed snapshots."
        if not run.drifts and not run.broken
        else f"{sum(len(d['changed']) + len(d['added']) + len(d['removed']) for d in run.drifts)} cases "
        f"changed in {len(run.drifts)} model/stage re-checks; {len(run.broken)} re-checks could not run."
    )
    lines = [
        "# Reference drift: the newest releases against the lock",
        "",
        f"Run {when} by `nox -s references-latest` (re-checks of `tests/references` against the "
        "committed snapshots; informational, never gating). "
        f"{run.passed} re-checks held, {run.skipped} skipped.",
        "",
        verdict,
        "",
        "## Versions",
        "",
        *_versions_table(run),
        "## Changed re-check cases (first divergence: snapshot -> newest reference)",
        "",
    ]
    if not run.drifts:
        lines += ["None.", ""]
    for drift in run.drifts:
        lines += _drift_section(drift)
    if run.broken:
        lines += ["## Re-checks that could not run or failed otherwise", ""]
        lines += [f"- `{nodeid}`: {why}" for nodeid, why in run.broken]
        lines.append("")
    return "\n".join(lines)
