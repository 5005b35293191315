"""The end of a run: the matrix on the terminal, the findings grouped by root cause and
shrunk (``specgate.run.triage``), the reports written (``specgate.reports.parity_report``) — or,
when the engine did not start, the reports saying so (``startup_report``). It sits above
``specgate.run`` (the floor it reads the session from) since it writes the reports."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from specgate.reports import parity_report as report
from specgate.run import crashloop, interrupts, startup, triage
from specgate.run.selection import selected_models, selected_stages
from specgate.run.session import SESSION, SpecgateSession


def summary(terminalreporter: Any, config: pytest.Config) -> None:
    """The parity matrix and the run's failures on the terminal, the findings grouped and
    shrunk, the reports written."""
    state = config.stash[SESSION]
    if (not state.records and not interrupts.interrupted(config)) or state.setup_error:
        return terminalreporter.write_line(f"ERROR: {state.setup_error}") if state.setup_error else None
    terminalreporter.write_sep("=", f"specgate parity matrix — impl {state.impl}")
    terminalreporter.write_line(report.headline(state.records))
    terminalreporter.write_line(report.matrix_text(state.records))
    for problem in [*crashloop.notes(state.records), *state.verdict]:
        terminalreporter.write_line(report.terminal(f"specgate: RUN FAILS — {problem}"), red=True, bold=True)
    startup.attach_provenance(state, config, selected_models, selected_stages)
    try:
        shrink_reproducers(state, config, terminalreporter)
    finally:
        close_engine(state)
    for note in state.diagnosis_notes:
        terminalreporter.write_line(report.terminal(f"specgate: {note}"), yellow=True)
    from specgate.run import junit_file
    from specgate.safe_io import files

    try:
        written = report.write_reports(state, config.getoption("--report-dir"))
        if junit_file.write_error(config):
            raise files.WriteError(junit_file.write_error(config))
    except files.WriteError as exc:  # a full disk, a directory gone: one line, a setup error (4)
        terminalreporter.write_line(report.terminal(f"ERROR: {exc}"), red=True, bold=True)
        if getattr(terminalreporter, "_session", None) is not None:
            terminalreporter._session.exitstatus = pytest.ExitCode.USAGE_ERROR
        return
    for path in written:
        terminalreporter.write_line(f"report: {path}")


def close_engine(state: SpecgateSession) -> None:
    """Close the gate's engine, kept running for the diagnosis and shrinking."""
    engine, state.engine = state.engine, None
    if engine is not None:
        engine.close()


def shrink_reproducers(state: SpecgateSession, config: pytest.Config, terminalreporter: Any) -> None:
    """Group the findings by root cause and shrink one reproducer per group against a
    fresh engine of the same ``--impl`` (``specgate.run.triage``), within --shrink-budget."""
    import time
    from pathlib import Path

    from specgate.safe_io import files

    repro_dir = (
        Path(config.getoption("--report-dir"))
        / "repro"
        / report.report_stem(state.report_name or state.impl, state.shard)
    )
    files.remove_stale(repro_dir)  # the stem's reproducers are this run's only
    if interrupts.interrupted(config):  # after a Ctrl-C no new engine is started
        state.groups = triage.group_records(state.records)
        interrupts.skip_shrinking(config, state.groups)
        return
    start = time.monotonic()
    fresh_reason = (
        "the gate ran in pytest-xdist workers, whose engines ended with them"
        if config.pluginmanager.get_plugin("dsession") is not None
        else "the gate never started it"
    )

    def examine_then_close() -> list[Any]:  # the engine's close is guarded too (a Ctrl-C may land in it)
        try:
            return examine()
        finally:
            close_engine(state)

    examine = lambda: triage.examine(  # noqa: E731
        state.records,
        state.impl,
        repro_dir,
        group_budget=config.getoption("--shrink-group-budget"),
        total_budget=config.getoption("--shrink-budget"),
        diagnose_budget=config.getoption("--diagnose-budget"),
        worth_shrinking=crashloop.worth_shrinking,  # not a crash loop's groups: any input dies
        engine=state.engine,  # the gate's own engine process: a slow load is not paid twice
        notes=state.diagnosis_notes,  # groups the budget left undiagnosed, a fresh engine's reason
        fresh_reason=fresh_reason,
    )  # fmt: skip
    state.groups = interrupts.guarded(config, state.records, examine_then_close)
    interrupts.after_shrinking(config, state)  # a Ctrl-C while diagnosing or shrinking: marked, exit 130
    if not any(g.records[0].outcome in triage.SHRUNK_OUTCOMES for g in state.groups):
        return
    made = sum(g.reproducer is not None for g in state.groups)
    named = sum(bool(g.diagnosis) for g in state.groups)
    terminalreporter.write_line(
        f"specgate: {len(state.groups)} root-cause groups, {named} with a diagnosed cause, {made} minimized "
        f"reproducers ({time.monotonic() - start:.1f} s of diagnosing and shrinking)"
    )


def startup_report(state: Any, config: Any, models_of: Callable, stages_of: Callable) -> None:
    """The reports of a run whose engine did not start (no case was gated): the verdict
    fails with the reason, the provenance says what was run. Printed like a run's."""
    startup.attach_provenance(state, config, models_of, stages_of)
    terminal = config.pluginmanager.get_plugin("terminalreporter")
    for path in report.write_reports(state, config.getoption("--report-dir")):
        if terminal is not None:
            terminal.write_line(f"report: {path}")
