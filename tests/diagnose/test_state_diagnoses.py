"""Every state diagnosis of the catalogue names its planted bug, and a look-alike is not
diagnosed.

Each engine is ``tests/engines/mutants/state_bugs.py BUG`` — the oracle with one planted
state bug (written there independently of the catalogue's knobs), a real ``cmd:``
process. Its state cases (the batch's too) on one tiny model are gated as the state gates gate them
(``specgate.checks.state``, the exact class: the quantized one reads the same answers),
and the failing ones diagnosed by the run's diagnoser (``specgate.diagnose.diagnoser``)
with that same engine, as triage does after a run. The oracle served the same way fails
nothing, and its answers played the diagnosis' way are the knob-free sessions' own.
``test_the_report_names_the_cause`` (slow) gates one mutant with ``specgate parity``
and reads the name back from its JSON and Markdown reports.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

from impl.process.client import CmdEngine
from specgate.checks import state as checks
from specgate.diagnose import state as catalogue
from specgate.diagnose.diagnoser import Diagnoser
from specgate.outcomes.verdict import GateRecord
from specgate.run.triage import case_input
from specgate.upkeep import snapshots
from specgate.upkeep.model_ids import model_for
from tests.engines.parity_run import run_parity, script_impl

MUTANTS = Path(__file__).resolve().parents[1] / "engines" / "mutants" / "state_bugs.py"
MODEL = "tiny-qwen2-f32"
CAUSE = {h.name: h.cause for h in catalogue.CATALOGUE}
SESSION_ROWS = ("state_incremental/exact", "state_conversation/exact", "state_reuse/exact")
ROWS = (*SESSION_ROWS, "state_batch/exact")

#: planted bug -> the rows it fails, and per row the diagnosis that must name every failing
#: case of it; the look-alike (the right logits plus noise after an append) fails both
#: rows — where the position bug does — and nothing may name it
PLANTED: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
    "no_truncate": (("state_conversation/exact",), {"state_conversation/exact": "no_truncate"}),
    "sessions_shared": (SESSION_ROWS, {row: "sessions_shared" for row in SESSION_ROWS}),
    "position_off_by_one": (SESSION_ROWS, {row: "position_off_by_one" for row in SESSION_ROWS}),
    "chunk_boundary": (SESSION_ROWS, {row: "chunk_boundary" for row in SESSION_ROWS}),
    "prefix_off_by_one": (SESSION_ROWS[1:], {"state_reuse/exact": "prefix_off_by_one"}),
    "fork_aliased": (SESSION_ROWS[1:], {"state_reuse/exact": "fork_aliased"}),
    "batch_padded": (ROWS[3:], {"state_batch/exact": "batch_padded"}),
    "batch_sorted": (ROWS[3:], {"state_batch/exact": "batch_sorted"}),
    "noisy_append": (SESSION_ROWS, {}),
}
#: planted bug -> the failing cases its diagnosis leaves out: a prefix cache's, failing in the
#: run through what sessions of *earlier* cases left in its pool (a conversation's first turn
#: started from another case's KV; a branch from a fork's clobbered cache). The diagnosis
#: plays a case after ``POOL`` empty sessions and its priming one — none of them leave
#: anything to reuse wrongly — so the engine answers these right there and none is named
UNNAMED: dict[str, dict[str, set[str]]] = {
    "prefix_off_by_one": {"state_reuse/exact": {"branch_cut_back"}},
    "fork_aliased": {"state_reuse/exact": {"branch_after_close", "branch_cut_back"}},
}


@pytest.fixture(scope="module")
def model(tiny_model: Any) -> Any:
    return tiny_model


def served(*argv: str) -> CmdEngine:
    return CmdEngine(shlex.join([sys.executable, *argv]))


def gated(engine: Any, model: Any) -> list[GateRecord]:
    """Every state case of ``model`` played and judged as the gates do, in the exact class."""
    records = []
    for stage, play, judge in (
        ("state_incremental", checks.play_incremental, checks.judge_incremental),
        ("state_conversation", checks.play_conversation, checks.judge_conversation),
        ("state_reuse", checks.play_reuse, checks.judge_reuse),
        ("state_batch", checks.play_batch, checks.judge_batch),
    ):
        for case_id, case in snapshots.load(model, stage).items():
            why = judge("exact", model.id, case, play(engine, model, case))
            row = f"{stage}/exact"
            records.append(
                GateRecord(
                    row, model.id, "fail" if why else "pass", f"{row}::{case_id}", why or "", case=case_id
                )
            )
    return records


@pytest.fixture(scope="module", params=list(PLANTED))
def diagnosed(request: pytest.FixtureRequest, model: Any) -> tuple[str, list[GateRecord], list[Any]]:
    """A mutant gated and its failing cases diagnosed with its own process: (the bug, the
    records, the diagnoses)."""
    bug = request.param
    engine = served(str(MUTANTS), bug)
    try:
        records = gated(engine, model)
        diagnoser = Diagnoser(engine, case_input, model_for, budget=600.0)
        found = diagnoser.diagnose(records)
        assert not diagnoser.notes, diagnoser.notes
    finally:
        engine.close()
    return bug, records, found


def test_every_state_hypothesis_of_the_catalogue_is_planted_here() -> None:
    assert {name for _, named in PLANTED.values() for name in named.values()} == set(CAUSE)


def test_a_planted_state_bug_is_diagnosed_by_name_and_a_look_alike_is_not(diagnosed) -> None:
    bug, records, found = diagnosed
    fails, named = PLANTED[bug]
    failing = {row: [r for r in records if r.stage == row and r.outcome == "fail"] for row in ROWS}
    assert {row for row in ROWS if failing[row]} == set(fails)
    assert {d.stage: d.name for d in found} == named, [(d.stage, d.name, len(d.records)) for d in found]
    for d in found:
        assert not d.alternatives, d.cause
        unnamed = UNNAMED.get(bug, {}).get(d.stage, set())
        assert unnamed <= {r.case for r in failing[d.stage]}
        named_cases = {r.nodeid for r in failing[d.stage] if r.case not in unnamed}
        assert {r.nodeid for r in d.records} == named_cases  # every failing case but those
        n, m = len(named_cases), len(failing[d.stage])
        assert d.evidence.startswith(
            f"{n} of {m} failing {d.stage} cases of {MODEL} equal the oracle's sessions played the same way "
        ), d.evidence
        assert (
            f" when it {CAUSE[d.name]}, with the same session counts and, at every judged point, "
            in d.evidence
        )
        m = re.search(r"max \|Δlogit\| ≤ ([\d.e-]+)\): measured max \|Δlogit\| ([\d.e+-]+), "
                      r"against the spec'd oracle ([\d.e+-]+)$", d.evidence)  # fmt: skip
        assert m, d.evidence
        tol, to_deviated, to_spec = map(float, m.groups())
        assert to_deviated <= tol < to_spec, d.evidence


def test_the_oracle_fails_no_state_case_and_its_answers_are_the_knob_free_sessions(model: Any) -> None:
    engine = served("-m", "specgate.cli", "engine", "--impl", "oracle")
    try:
        records = gated(engine, model)
        assert [r.nodeid for r in records if r.outcome != "pass"] == []
        assert Diagnoser(engine, case_input, model_for, budget=600.0).diagnose(records) == []
        sessions = catalogue.reference(model)
        for r in records:
            inp = catalogue.case_input(r)
            assert inp is not None, r.nodeid
            asked = catalogue.ask(engine, r.stage, model, inp)
            assert catalogue.same(r.stage, catalogue.answer(r.stage, sessions, inp, {}), asked), r.nodeid
            assert asked.held == [None] * len(asked.rows)
    finally:
        engine.close()


@pytest.mark.slow  # a parity run: 16-35 s on the loaded machine, as the forward catalogue's are slow
def test_the_report_names_the_cause(tmp_path: Path, model: Any) -> None:
    run = run_parity(
        tmp_path, script_impl(MUTANTS, "no_truncate"), "state_incremental,state_conversation", MODEL,
        "--shrink-budget", "0", "--diagnose-budget", "600",
    )  # fmt: skip
    assert run.status == 1, run.output[-3000:]
    groups = [g for g in run.report["groups"] if g.get("diagnosis")]
    assert [g["diagnosis"] for g in groups] == [CAUSE["no_truncate"]], run.report["groups"]
    assert groups[0]["stages"] == ["state_conversation/exact", "state_conversation/quantized"]
    assert groups[0]["count"] == 6
    markdown = next((tmp_path / "reports").glob("parity-*.md")).read_text(encoding="utf-8")
    shown = re.sub(r"\\(.)", r"\1", markdown)  # the Markdown as shown
    assert f"**Diagnosis:** {groups[0]['evidence']}." in shown
