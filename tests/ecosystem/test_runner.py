"""The ecosystem runner (``specgate.ecosystem``) on throwaway engine folders: an engine that
cannot be installed is a row with the installer's message; a hanging engine is a row
reading timeout, killed with what it started; the table's counts are the engine's JSON
report's."""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from pathlib import Path

import pytest

from specgate import ecosystem
from tests.ecosystem.engines import ORACLE, WRONG_ADAPTER, engine_folder, hanging_adapter, wrong_engine

FAST = ["--max-cases", "5", "--shrink-budget", "0"]


def table_rows(markdown: str, section: str = "## Engines × stages") -> list[list[str]]:
    """The cells of the Markdown table under ``section``."""
    body = markdown.split(section, 1)[1].split("\n## ", 1)[0]
    return [
        [c.strip() for c in line.strip("|").split("|")] for line in body.splitlines() if line.startswith("| ")
    ][1:]


def test_unavailable_engine_is_a_row_with_the_installers_message(tmp_path: Path) -> None:
    root = tmp_path / "engines"
    engine_folder(root, "bogus", ORACLE, package="specgate-no-such-engine", version="9.9.9")
    empty = tmp_path / "no-packages"
    empty.mkdir()
    table = ecosystem.run_all(
        root, tmp_path / "reports", budget=60, pip_args=["--no-index", "--find-links", str(empty)], extra=FAST
    )
    (row,) = table.rows
    assert (row.install.status, row.status) == ("unavailable", "unavailable")
    markdown = (tmp_path / "reports" / "ecosystem.md").read_text(encoding="utf-8")
    # pip's own words, in the table, under the engine's section.
    assert "No matching distribution found for specgate-no-such-engine==9.9.9" in markdown
    assert re.search(
        r"\| bogus \| `specgate-no-such-engine` \| 9\.9\.9 \| pip \| unavailable \| unavailable \|", markdown
    )
    assert "No matching distribution found" in (tmp_path / "reports" / "ecosystem.html").read_text(
        encoding="utf-8"
    )


@pytest.mark.slow  # waits out a real budget, then checks nothing survives
def test_hanging_engine_is_a_timeout_and_leaves_nothing_running(tmp_path: Path) -> None:
    root = tmp_path / "engines"
    root.mkdir()
    engine_folder(root, "hangs", hanging_adapter(tmp_path))
    table = ecosystem.run_all(root, tmp_path / "reports", budget=20, extra=FAST)
    (row,) = table.rows
    assert row.status == "timeout", (row.status, row.message)
    assert row.message == "not finished within its budget of 20 s; stopped"
    # stopped at its budget (never before), then the interrupt's grace; the slack is the
    # teardown's, on a machine as busy as CI's — the adapter itself would hang forever
    assert 20 <= row.seconds < 20 + ecosystem.INTERRUPT_GRACE + 60
    markdown = (tmp_path / "reports" / "ecosystem.md").read_text(encoding="utf-8")
    assert re.search(r"\| hangs \| `specgate` \| [^|]+ \| pip \| already installed \| timeout \|", markdown)
    # The adapter runs in its own process group (the cmd engine's): the kernel kills it
    # when the killed gate run dies (parent-death signal), a moment later.
    pid = int((tmp_path / "hang.pid").read_text())
    deadline = time.monotonic() + 60  # gone at once on a quiet machine; a busy one reaps later
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not alive(pid), f"the hanging adapter (pid {pid}) outlived its timeout"


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting to be reaped does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def test_table_counts_are_the_engines_json_reports(tmp_path: Path) -> None:
    root = tmp_path / "engines"
    engine_folder(root, "oracle_through_protocol", ORACLE, stages=("split", "encode", "decode"))
    table = ecosystem.run_all(root, tmp_path / "reports", budget=300, extra=FAST)
    (row,) = table.rows
    assert row.status == "ran", row.message
    (report_file,) = (tmp_path / "reports" / "ecosystem" / "oracle_through_protocol").glob("parity-*.json")
    cases = json.loads(report_file.read_text(encoding="utf-8"))["cases"]
    expected = Counter((c["stage"], c["outcome"]) for c in cases)
    markdown = (tmp_path / "reports" / "ecosystem.md").read_text(encoding="utf-8")
    shown = Counter()
    for cells in table_rows(markdown):
        assert cells[0] == "oracle_through_protocol"
        for outcome, count in zip(ecosystem.OUTCOMES, cells[2:], strict=True):
            if int(count):
                shown[(cells[1], outcome)] += int(count)
    assert shown == expected
    assert {stage for stage, _ in expected} == {"split", "encode", "decode"}


def test_a_bad_engine_toml_is_one_line_naming_the_problem_and_a_table_problem(tmp_path: Path) -> None:
    root = tmp_path / "engines"
    folder = engine_folder(root, "typo", ORACLE, stages=("encdoe",))
    try:
        ecosystem.EngineSpec.load(folder)
    except ecosystem.EcosystemError as exc:
        assert str(exc) == f"{folder / 'engine.toml'}: unknown stage(s) encdoe; known: " + ", ".join(
            ecosystem_stages()
        )
    else:
        raise AssertionError("a misspelt stage was accepted")
    (folder / "engine.toml").write_text('name = "x"\n', encoding="utf-8")
    table = ecosystem.run_all(root, tmp_path / "reports", budget=5)
    assert table.rows == []
    assert table.problems == [
        f"{folder / 'engine.toml'}: 'stages' must be a non-empty list of strings, got None"
    ]
    assert (
        "'stages' must be a non-empty list of strings" in (tmp_path / "reports" / "ecosystem.md").read_text()
    )


def ecosystem_stages() -> tuple[str, ...]:
    from specgate.stages import GATE_STAGES

    return GATE_STAGES


def test_an_engines_env_table_reaches_its_gate_runs(tmp_path: Path) -> None:
    """``[env]`` sets SPECGATE_* variables for one engine's runs only: a startup deadline
    no engine can meet stops the oracle's run at its handshake, naming the deadline."""
    root = tmp_path / "engines"
    folder = engine_folder(root, "impatient", ORACLE, stages=("encode",))
    with (folder / "engine.toml").open("a", encoding="utf-8") as toml:
        toml.write('[env]\nSPECGATE_CMD_STARTUP_TIMEOUT = "0.001"\n')
    table = ecosystem.run_all(root, tmp_path / "reports", budget=300, extra=FAST)
    (row,) = table.rows
    assert row.status == "error", (row.status, row.message)
    assert "no answer to the handshake within 0.001 s" in row.message, row.message


def test_an_env_table_takes_only_specgate_settings(tmp_path: Path) -> None:
    folder = engine_folder(tmp_path, "leaky", ORACLE)
    with (folder / "engine.toml").open("a", encoding="utf-8") as toml:
        toml.write('[env]\nLD_PRELOAD = "/tmp/x.so"\n')
    try:
        ecosystem.EngineSpec.load(folder)
    except ecosystem.EcosystemError as exc:
        assert "[env] must map SPECGATE_* variables to strings" in str(exc)
    else:
        raise AssertionError("an [env] outside SPECGATE_* was accepted")


#: What the heavy engine holds while it answers: far above a gate run's own few hundred MB.
HELD_MB = 600


@pytest.mark.slow  # two ecosystem runs, one engine holding 600 MB (~8 s)
def test_an_engines_peak_memory_is_measured_and_in_the_table(tmp_path: Path) -> None:
    """The table's cost columns: an engine that holds 600 MB while it answers shows a peak of
    at least that (its process is part of the runner's tree), a light one a lower peak, and
    the whole run's peak is in the machine line."""
    root = tmp_path / "engines"
    light = wrong_engine(root, "light")
    heavy = wrong_engine(root, "heavy")
    (heavy / "adapter.py").write_text(
        f"held = b'x' * ({HELD_MB} * 2**20)  # written, so resident\n" + WRONG_ADAPTER, encoding="utf-8"
    )
    assert light.exists()
    table = ecosystem.run_all(root, tmp_path / "reports", budget=300, extra=FAST)
    rows = {row.key: row for row in table.rows}
    assert {r.status for r in rows.values()} == {"ran"}, [(r.key, r.message) for r in rows.values()]
    assert rows["heavy"].peak_bytes >= HELD_MB * 2**20, rows["heavy"].peak_bytes
    assert rows["light"].peak_bytes < rows["heavy"].peak_bytes - HELD_MB * 2**20 // 2, (
        rows["light"].peak_bytes,
        rows["heavy"].peak_bytes,
    )
    assert table.peak_bytes >= rows["heavy"].peak_bytes
    markdown = (tmp_path / "reports" / "ecosystem.md").read_text(encoding="utf-8")
    engines = {cells[0]: cells for cells in table_rows(markdown, "protocol violation).")}
    assert float(engines["heavy"][-1]) >= HELD_MB * 2**20 / 1e9, engines["heavy"]
    assert f"its peak memory {table.peak_bytes / 1e9:.2f} GB" in markdown
    saved = json.loads((tmp_path / "reports" / "ecosystem.json").read_text(encoding="utf-8"))
    assert saved["peak_bytes"] == table.peak_bytes
    assert {r["key"]: r["peak_bytes"] for r in saved["rows"]} == {k: r.peak_bytes for k, r in rows.items()}
