"""A saved table marked again, without gating anything (``python -m specgate.ecosystem remark``):
its ``ecosystem.json`` and the engines' JSON reports it names are read back, each root cause
is marked with the ``[[confirm.groups]]`` entries of the engine folders as they are now, and
the table is written anew under ``--out``. The confirm lines are the saved run's, or with
``rerun_confirm`` each confirm script's run now (the engines must be installed).

Nothing saved is written over: the table goes to ``out`` (the saved table's own folder is
refused), which is how an entry's change is checked on a real run's groups.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from specgate.ecosystem.confirm import CONFIRM_FLOOR_SECONDS, ConfirmRun, run_confirm
from specgate.ecosystem.gating import EngineRun, with_short_paths
from specgate.ecosystem.install import Install
from specgate.ecosystem.results import Table
from specgate.ecosystem.spec import ECOSYSTEM_DIR, ConfirmedGroup, EcosystemError, EngineSpec, child_path
from specgate.reports.diff import DiffError, read_report
from specgate.safe_io import files

#: The most bytes of a saved table: its JSON holds the rows, their counts and confirm
#: runs, not the cases (those are in the engines' reports, each read within
#: ``specgate.reports.diff.MAX_REPORT_BYTES``).
MAX_TABLE_BYTES = 64 << 20


def load_row(saved: dict[str, Any], root: Path | None, base: Path, rerun_confirm: bool) -> EngineRun:
    """One saved row, its reports read back (named relative to ``base``, the folder holding the
    reports folder, or absolute), its marks by the engine folder's entries under ``root`` as they
    are now, or with ``root`` None by the entries saved with it."""
    row = EngineRun(
        saved["key"],
        saved["name"],
        saved["package"],
        saved["version"],
        saved["installer"],
        Install(**saved["install"]),
        status=saved["status"],
        message=saved["message"],
        seconds=saved["seconds"],
        budget=saved["budget"],
        budget_note=saved.get("budget_note", ""),
        peak_bytes=int(saved.get("peak_bytes") or 0),  # tables saved before it was measured: 0
        report_files=list(saved.get("report_files") or []),
    )
    for name in row.report_files:
        try:
            payload = read_report(base / name)  # an absolute name stays itself
        except DiffError as exc:
            raise EcosystemError(f"{row.key}: cannot read its report: {exc}") from None
        row.reports.append(with_short_paths(payload, base))
    if root is None:
        spec = None
        row.confirm_groups = [ConfirmedGroup(**g) for g in saved.get("confirm_groups") or []]
    else:
        folder = root / row.key
        spec = EngineSpec.load(folder) if (folder / "engine.toml").is_file() else None
        row.confirm_groups = list(spec.confirm_groups) if spec else []
    said = saved.get("confirm")
    if rerun_confirm and spec is not None and row.groups():
        env = {**os.environ, **spec.env, "PATH": child_path()}
        row.confirm = run_confirm(spec, max(row.budget, CONFIRM_FLOOR_SECONDS), env)
    elif said is not None:
        row.confirm = ConfirmRun(**{**said, "lines": [tuple(x) for x in said.get("lines", [])]})
    return row


def load(saved: Path, root: Path | None = ECOSYSTEM_DIR, rerun_confirm: bool = False) -> Table:
    """The saved table ``saved`` (an ``ecosystem*.json``, read within ``MAX_TABLE_BYTES``) with its
    engines' reports; ``root`` as ``load_row``'s. A file that is not one: ``EcosystemError``, one line."""
    try:
        data = files.read_json(saved, MAX_TABLE_BYTES, "saved ecosystem table")
    except files.UnsafeFile as exc:
        raise EcosystemError(str(exc)[:500]) from None
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
        raise EcosystemError(f"{saved}: not a saved ecosystem table (no list of rows)")
    base = Path(saved).resolve().parent.parent  # the folder holding the reports folder
    try:
        return Table(
            [load_row(r, root, base, rerun_confirm) for r in data["rows"]],
            data["started"],
            data["seconds"],
            data["machine_before"],
            data["machine_after"],
            list(data.get("problems") or []),
            engines=data.get("engines"),
            peak_bytes=int(data.get("peak_bytes") or 0),
        )
    except EcosystemError:
        raise  # a report it names is missing or not one: said with the engine's key
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise EcosystemError(
            f"{saved}: not a saved ecosystem table: {type(exc).__name__}: {str(exc)[:200]}"
        ) from None


def remark(saved: Path, out: Path, root: Path = ECOSYSTEM_DIR, rerun_confirm: bool = False) -> Table:
    """The saved table ``saved`` (an ``ecosystem*.json``) marked again and written to ``out``."""
    from specgate.ecosystem.table import write_table

    if Path(out).resolve() == Path(saved).resolve().parent:
        raise EcosystemError(
            f"--out {out}: that is the saved table's own folder; write the re-marked one elsewhere"
        )
    table = load(saved, root, rerun_confirm)
    write_table(table, out)
    return table


def counts(table: Table) -> dict[str, int]:
    """How many published root causes (the top groups of each engine) carry each mark."""
    from specgate.ecosystem.markdown import TOP_CAUSES

    marks: dict[str, int] = {}
    for row in table.rows:
        for group in row.groups()[:TOP_CAUSES]:
            status = row.mark(group)[0]
            marks[status] = marks.get(status, 0) + 1
    return marks
