"""A saved table marked again, without gating anything (``python -m specgate.ecosystem remark``):
its ``ecosystem.json`` and the engines' JSON reports it names are read back, each root cause
is marked with the ``[[confirm.groups]]`` entries of the engine folders as they are now, and
the table is written anew under ``--out``. The confirm lines are the saved run's, or with
``rerun_confirm`` each confirm script's run now (the engines must be installed).

Nothing saved is written over: the table goes to ``out`` (the saved table's own folder is
refused), which is how an entry's change is checked on a real run's groups.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from specgate.ecosystem.confirm import CONFIRM_FLOOR_SECONDS, ConfirmRun, run_confirm
from specgate.ecosystem.gating import EngineRun, with_short_paths
from specgate.ecosystem.install import Install
from specgate.ecosystem.results import Table
from specgate.ecosystem.spec import ECOSYSTEM_DIR, EcosystemError, EngineSpec, child_path


def load_row(saved: dict[str, Any], root: Path, base: Path, rerun_confirm: bool) -> EngineRun:
    """One saved row, its reports read back, its marks by the folder's entries as they are now."""
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
        report_files=list(saved.get("report_files") or []),
    )
    for name in row.report_files:
        try:
            payload = json.loads(Path(name).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise EcosystemError(f"{row.key}: cannot read its report {name}: {exc}") from None
        row.reports.append(with_short_paths(payload, base))
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


def remark(saved: Path, out: Path, root: Path = ECOSYSTEM_DIR, rerun_confirm: bool = False) -> Table:
    """The saved table ``saved`` (an ``ecosystem*.json``) marked again and written to ``out``."""
    from specgate.ecosystem.table import write_table

    if Path(out).resolve() == Path(saved).resolve().parent:
        raise EcosystemError(
            f"--out {out}: that is the saved table's own folder; write the re-marked one elsewhere"
        )
    try:
        data = json.loads(Path(saved).read_text(encoding="utf-8"))
        rows = data["rows"]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as exc:
        raise EcosystemError(f"{saved}: not a saved ecosystem table: {exc}") from None
    base = Path(saved).resolve().parent.parent  # the folder holding the reports folder
    table = Table(
        [load_row(r, root, base, rerun_confirm) for r in rows],
        data["started"],
        data["seconds"],
        data["machine_before"],
        data["machine_after"],
        list(data.get("problems") or []),
        engines=data.get("engines"),
    )
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
