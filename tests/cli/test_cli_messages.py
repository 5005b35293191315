"""The ``specgate`` command's usage errors, as the user sees them — exit status and the
whole of stderr — kept as syrupy snapshots (``tests/cli/__snapshots__/test_cli_messages.ambr``):
a reworded message, a changed exit status or a traceback shows as a diff to review
(``pytest --snapshot-update`` accepts it). Each case is a real ``python -m specgate.cli``
process in an empty folder (relative paths, so no machine path reaches a message), with a
fixed terminal width and no colour. Messages that list what the manifest or the registry
hold are left out: they change whenever a model or an adapter is added.

Also here: ``--snapshot-update`` is syrupy's now; where it once meant recording the
reference snapshots it is one usage line naming ``--record-references``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from specgate.upkeep.snapshots import old_record_spelling
from tests.child_pytest import run_pytest

ROOT = Path(__file__).resolve().parents[2]

CASES = {
    "no command": ([], {}),
    "models without action": (["models"], {}),
    "models export without a folder": (["models", "export", "onlyone"], {}),
    "repro without anything": (["repro"], {}),
    "repro of a missing file": (["repro", "missing.json", "--impl", "oracle"], {}),
    "report without action": (["report"], {}),
    "report diff of one file": (["report", "diff", "a.json"], {}),
    "report diff of missing files": (["report", "diff", "a.json", "b.json"], {}),
    "report merge of a missing file": (["report", "merge", "a.json"], {}),
    "search without impl": (["search"], {}),
    "search with a bad budget": (["search", "--impl", "oracle", "--budget", "soon"], {}),
    "a bad timeout setting": (["models", "list"], {"SPECGATE_CMD_TIMEOUT": "soon"}),
}


@pytest.mark.parametrize("name", list(CASES))
def test_cli_usage_error(name: str, tmp_path: Path, snapshot) -> None:
    args, env = CASES[name]
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SPECGATE_") or k == "SPECGATE_CACHE"}
    proc = subprocess.run(
        [sys.executable, "-m", "specgate.cli", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**clean, "COLUMNS": "80", "NO_COLOR": "1", "PYTHON_COLORS": "0", "PYTHONPATH": str(ROOT), **env},
    )
    assert proc.stdout == ""
    assert {"exit": proc.returncode, "stderr": proc.stderr} == snapshot


def collect_only(*args: str) -> subprocess.CompletedProcess[str]:
    return run_pytest("--collect-only", "-q", *args, timeout=120)


@pytest.mark.parametrize("plugins", [[], ["-p", "no:syrupy"]], ids=["with syrupy", "without syrupy"])
def test_the_old_spelling_of_record_references_is_one_usage_line(plugins: list[str]) -> None:
    """``--snapshot-update`` on a run of only the reference recorders (what ``nox -s snapshots``
    ran) would re-check the references instead of recording them; without syrupy it would
    update nothing. Either way: exit 4 and one line that names the new option."""
    proc = collect_only("tests/references", "--live-references", "--snapshot-update", *plugins)
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("ERROR: --snapshot-update "), proc.stderr
    assert "--record-references" in lines[0] and "Traceback" not in proc.stdout + proc.stderr


def test_snapshot_update_is_syrupys_where_the_run_has_layout_snapshots() -> None:
    """The same option on a run that reaches beyond the recorders is syrupy's update, not an
    error (``pytest --snapshot-update`` over the suite); the recorders take the new spelling."""
    recorders = ROOT / "tests" / "references"
    assert old_record_spelling([ROOT / "tests"], recorders, syrupy_loaded=True) == ""
    assert (
        old_record_spelling(
            [recorders, ROOT / "tests" / "upkeep" / "test_lock.py"], recorders, syrupy_loaded=True
        )
        == ""
    )
    assert old_record_spelling([recorders / "test_render.py"], recorders, syrupy_loaded=True)
    assert collect_only("tests/references/test_metadata.py", "--record-references").returncode == 0
