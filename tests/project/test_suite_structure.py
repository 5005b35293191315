"""The suite's own shape: gate modules stay thin (the plugin parametrizes them and
``specgate.checks`` compares), and the snapshots are the suite's plain, stable JSON
with each case carrying its inputs."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from specgate.upkeep import corpus, snapshots

GATES = sorted((Path(__file__).parents[2] / "specgate" / "gates").glob("test_*.py"))
assert GATES, "the gate modules are specgate/gates/test_*.py"
SNAPSHOT_FILES = sorted(snapshots.SNAPSHOT_ROOT.glob("*/*.json"))


@pytest.mark.parametrize("path", GATES, ids=lambda p: p.name)
def test_gate_module_holds_only_its_gates(path):
    """No parametrization hook and no helper: what a gate compares lives in
    ``specgate.checks``, where the reference re-checks and mutation tests reach it."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    defined = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    others = [name for name in defined if not name.startswith("test_")]
    assert not others, f"{path.name} defines {others}: move them to specgate/checks or the plugin"


@pytest.mark.parametrize("path", SNAPSHOT_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_snapshot_file_is_the_suites_stable_json(path):
    """Re-writing a committed snapshot changes no byte: a re-recording that says the same
    thing leaves no diff."""
    text = path.read_text(encoding="utf-8")
    assert snapshots.dumps(json.loads(text)) == text


@pytest.mark.parametrize(
    "path", [p for p in SNAPSHOT_FILES if p.stem in ("render", "template", "render_template")]
)
def test_render_snapshot_cases_carry_the_corpus_inputs(path):
    """The render gates read their inputs from the snapshot; those are the corpus's, in
    the corpus's order (a template's ``tojson`` shows the order of a tool's keys)."""
    cases = json.loads(path.read_text(encoding="utf-8"))["cases"]
    if path.stem == "render_template":
        want = corpus.constructs()
    else:
        want = {k: case.inputs() for k, case in corpus.render_cases().items()}
    for case_id, case in cases.items():
        if case_id == "template-identity":
            continue
        inputs = want[case_id.removeprefix("ids/")]
        assert {k: json.dumps(case[k]) for k in inputs} == {k: json.dumps(v) for k, v in inputs.items()}, (
            case_id
        )
