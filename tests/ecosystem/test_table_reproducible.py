"""The committed table is reproducible and says what was confirmed by hand:

* each published root cause is marked *confirmed* (the engine folder's confirm script, its
  own API outside specgate, still reproduces it), *confirm fails* (called out, not published
  as the engine's defect) or *not confirmed*;
* no path of the machine that made it: report stems from machine-independent ``--impl``
  values, reproducers named relative to the reports' parent, no project/home/cache path;
* an ``--engines`` subset writes its own report and never ECOSYSTEM.md;
* budgets scale with each engine's measured cost and the machine's load.

Real subprocess engines (a protocol adapter that answers every encode with [0]) gated by the
real gate runs, on 3 cases each.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest

from specgate import ecosystem
from specgate.supply.models import PROJECT_ROOT, cache_dir
from tests.ecosystem.engines import ORACLE, engine_folder, unavailable_engine, wrong_engine

FAST = ["--max-cases", "3", "--shrink-budget", "5"]


def slug(text: str) -> str:
    """A path as the report stem spells it (specgate.reports.parity_report.report_stem)."""
    return re.sub(r"[^A-Za-z0-9-]+", "_", text).strip("_")


def causes(markdown: str) -> dict[str, list[str]]:
    """The rows of the table's root-cause section, by engine."""
    body = markdown.split("## Root causes and their confirmation", 1)[1].split("\n## ", 1)[0]
    rows = [
        [c.strip() for c in line.strip("|").split("|")] for line in body.splitlines() if line.startswith("| ")
    ]
    return {cells[0]: cells for cells in rows[1:]}


@pytest.mark.slow  # three ecosystem runs of planted engines (~12 s)
def test_each_published_root_cause_is_marked_by_its_confirm_script(tmp_path: Path) -> None:
    root = tmp_path / "engines"
    wrong_engine(root, "confirmed", confirm_says="REPRODUCES")
    wrong_engine(root, "gone", confirm_says="GONE")
    wrong_engine(root, "unchecked")
    table = ecosystem.run_all(root, tmp_path / "reports", budget=300, extra=FAST)
    assert [r.status for r in table.rows] == ["ran"] * 3, [(r.key, r.message) for r in table.rows]
    markdown = (tmp_path / "reports" / "ecosystem.md").read_text(encoding="utf-8")
    rows = causes(markdown)
    assert rows["confirmed"][2:] == ["fail: encode", "3", "confirmed"], rows
    assert rows["gone"][2:] == ["fail: encode", "3", "confirm fails"], rows
    assert rows["unchecked"][2:] == ["fail: encode", "3", "not confirmed"], rows
    # The group whose hand reproduction is gone is called out where it is shown.
    gone = markdown.split("\n## gone\n", 1)[1].split("\n## ", 1)[0]
    heading = next(
        line for line in gone.splitlines() if line.startswith("### gone · fail: encode · 3 cases (group 1)")
    )
    assert heading.endswith(" — hand reproduction fails: not published as the engine's defect"), heading
    assert "'encode answers [0]' GONE" in gone
    confirmed = markdown.split("\n## confirmed\n", 1)[1].split("\n## ", 1)[0]
    assert "**confirmed**: `python" in confirmed and "confirm.py` reproduces it" in confirmed
    assert "hand reproduction fails" not in confirmed
    # Every line the confirm script printed is shown with the engine, linked to a group or not.
    assert "): 1 of 1 reproduce." in confirmed
    assert "- REPRODUCES: encode answers [0]: engine [0] vs reference [9707]" in confirmed
    assert "): 0 of 1 reproduce." in gone
    html = (tmp_path / "reports" / "ecosystem.html").read_text(encoding="utf-8")
    assert "hand reproduction fails: not published as the engine&#x27;s defect" in html


def test_a_confirm_group_needs_a_confirm_command(tmp_path: Path) -> None:
    folder = engine_folder(tmp_path, "half", ORACLE)
    with (folder / "engine.toml").open("a", encoding="utf-8") as toml:
        toml.write('[[confirm.groups]]\nstage = "encode"\ncases = ["qwen3-vocab/x"]\ndivergences = ["y"]\n')
    with pytest.raises(
        ecosystem.EcosystemError, match=r"\[\[confirm.groups\]\] without a \[confirm\] command"
    ):
        ecosystem.EngineSpec.load(folder)


@pytest.fixture
def project_engines():
    """A folder for engine folders inside the project (as impl/ecosystem/ is), removed after."""
    root = PROJECT_ROOT / "reports" / "ecosystem-test-engines"
    shutil.rmtree(root, ignore_errors=True)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_the_table_holds_no_path_of_the_machine_that_made_it(tmp_path: Path, project_engines: Path) -> None:
    wrong_engine(project_engines, "wrong", confirm_says="REPRODUCES")
    out = tmp_path / "reports"
    table = ecosystem.run_all(project_engines, out, budget=300, extra=FAST)
    (row,) = table.rows
    assert row.status == "ran", row.message
    (report_file,) = (out / "ecosystem" / "wrong").glob("parity-*.json")
    # The stem spells the --impl value: neither this interpreter's path nor the project's.
    assert report_file.name.startswith("parity-cmd_python_reports_ecosystem-test-engines_wrong_adapter_py-")
    for machine in (slug(sys.executable), slug(str(PROJECT_ROOT)), slug(str(tmp_path))):
        assert machine not in report_file.name
    (group,) = row.groups()
    assert group["reproducer_file"].startswith("reports/ecosystem/wrong/repro/parity-cmd_python_"), group
    assert (tmp_path / group["reproducer_file"]).is_file()
    for name in ("ecosystem.md", "ecosystem.html"):
        text = (out / name).read_text(encoding="utf-8")
        for machine in (str(PROJECT_ROOT), str(tmp_path), str(Path.home()), str(cache_dir()), sys.executable):
            assert machine not in text, (name, machine)
        assert "reports/ecosystem/wrong/repro/parity-cmd_python_reports_ecosystem-test-engines" in text


def test_an_engines_subset_writes_its_own_report_and_never_the_published_table(tmp_path: Path) -> None:
    root = tmp_path / "engines"
    unavailable_engine(root, "alpha")
    unavailable_engine(root, "beta")
    out, published = tmp_path / "reports", tmp_path / "ECOSYSTEM.md"
    published.write_text("the full table\n", encoding="utf-8")
    subset = ecosystem.run_all(root, out, engines=["beta"])
    assert [r.key for r in subset.rows] == ["beta"]
    assert (out / "ecosystem-beta.md").is_file() and (out / "ecosystem-beta.json").is_file()
    assert not (out / "ecosystem.md").exists()
    said = ecosystem.publish(subset, out, published)
    assert published.read_text(encoding="utf-8") == "the full table\n"
    assert "left as it was" in said
    full = ecosystem.run_all(root, out)
    ecosystem.publish(full, out, published)
    text = published.read_text(encoding="utf-8")
    assert "| alpha |" in text and "| beta |" in text
    assert "needs a GPU this machine lacks" in text  # the row says why it cannot run here
    assert re.search(r"\| beta \| `specgate` \| [^|]+ \| pip \| unavailable \| unavailable \|", text)


def test_the_command_line_publishes_only_the_full_table(tmp_path: Path) -> None:
    from specgate.ecosystem.cli import main

    root = tmp_path / "engines"
    unavailable_engine(root, "alpha")
    unavailable_engine(root, "beta")
    out, published = tmp_path / "reports", tmp_path / "ECOSYSTEM.md"
    argv = ["run", "--root", str(root), "--out", str(out), "--publish", str(published)]
    assert main([*argv, "--engines", "alpha"]) == 0
    assert not published.exists()
    assert main(argv) == 0
    assert "| alpha |" in published.read_text(encoding="utf-8")


def test_budgets_scale_with_the_measured_cost_and_the_machines_load(tmp_path: Path) -> None:
    from specgate.ecosystem import budgets

    folder = engine_folder(tmp_path, "measured", ORACLE)
    text = (folder / "engine.toml").read_text(encoding="utf-8")
    (folder / "engine.toml").write_text(text.replace("[ci]", "cost = 100\n[ci]"), encoding="utf-8")
    spec = ecosystem.EngineSpec.load(folder)
    assert spec.cost == 100
    quiet = budgets.engine_budget(spec, budgets.load_factor(load=0.5, cores=2))
    busy = budgets.engine_budget(spec, budgets.load_factor(load=8.0, cores=2))
    assert quiet == 100 * budgets.MARGIN
    assert busy == 4 * quiet  # four times the work of the cores: four times the time
    assert budgets.load_factor(load=1000.0, cores=2) == budgets.MAX_FACTOR
    assert budgets.engine_budget(spec, 4.0, fixed=50.0) == 50.0
    cheap = ecosystem.EngineSpec.load(engine_folder(tmp_path, "cheap", ORACLE))
    assert budgets.engine_budget(cheap, 1.0) >= budgets.FLOOR


def test_a_run_without_budget_gives_each_engine_its_scaled_cost(tmp_path: Path) -> None:
    from specgate.ecosystem import budgets

    root = tmp_path / "engines"
    folder = unavailable_engine(root, "measured")
    text = (folder / "engine.toml").read_text(encoding="utf-8")
    (folder / "engine.toml").write_text(text.replace("[ci]", "cost = 100\n[ci]"), encoding="utf-8")
    table = ecosystem.run_all(root, tmp_path / "reports")
    (row,) = table.rows
    assert row.budget >= 100 * budgets.MARGIN  # never the old fixed 600 s whatever the cost and load
    assert "measured cost 100 s × 3 (at least 120 s) × load factor" in row.budget_note
    summary = json.loads((tmp_path / "reports" / "ecosystem.json").read_text(encoding="utf-8"))
    assert summary["rows"][0]["budget"] == row.budget


def test_a_bad_cost_is_one_line(tmp_path: Path) -> None:
    folder = engine_folder(tmp_path, "free", ORACLE)
    text = (folder / "engine.toml").read_text(encoding="utf-8")
    (folder / "engine.toml").write_text(text.replace("[ci]", 'cost = "fast"\n[ci]'), encoding="utf-8")
    with pytest.raises(ecosystem.EcosystemError, match="cost must be a positive number of seconds"):
        ecosystem.EngineSpec.load(folder)


def test_marks_of_reference_disagreements_and_of_confirm_runs_that_did_not_report() -> None:
    from specgate.ecosystem.confirm import DISAGREE, ConfirmRun, mark, parse
    from specgate.ecosystem.spec import ConfirmedGroup

    entries = [ConfirmedGroup("decode", ["lone byte"], cases=["qwen3-vocab/token-121"])]
    group = {
        "stage": "decode",
        "outcome": "fail",
        "signature": "decode · fail · bytes differ at byte N",
        "first_cases": ["specgate/gates/test_tokenizer.py::test_decode[qwen3-vocab/token-121]"],
    }
    disagreement = {**group, "outcome": "reference-disagreement"}
    assert mark(disagreement, entries, None)[0] == DISAGREE
    assert mark(group, entries, None)[0] == ecosystem.FAILS
    crashed = ConfirmRun("node confirm.mjs", "error", 3, [], "Error: boom")
    assert mark(group, entries, crashed) == (ecosystem.FAILS, "`node confirm.mjs` error: ['Error: boom']")
    # Both spellings of the verdict lines (the older scripts print "REPRODUCED  what").
    said = parse("REPRODUCED  lone byte: engine 'efbfbd'\nnoise\nGONE: other\n")
    assert said == [("REPRODUCES", "lone byte: engine 'efbfbd'"), ("GONE", "other")]
    assert mark(group, entries, ConfirmRun("x", "ran", 0, said))[0] == ecosystem.CONFIRMED
    assert (
        mark({**group, "stage": "encode"}, entries, ConfirmRun("x", "ran", 0, said))[0]
        == ecosystem.UNCONFIRMED
    )
