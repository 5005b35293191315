"""A diagnosis whose budget runs out says so (issue 35), without a model or an engine:
the diagnoser's rows left for lack of time become one line — how many failing groups
were left undiagnosed, and why — in the JSON, Markdown and HTML reports. (The run with a
real engine, and the terminal summary, are ``test_diagnosis_budget.py``.)"""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

from specgate.diagnose.diagnoser import DIAGNOSABLE_ROWS, Diagnoser
from specgate.outcomes.verdict import GateRecord
from specgate.reports import parity_report as reports
from specgate.run import triage

NOTE = re.compile(r"diagnosis cut short: (\d+) of (\d+) failing groups? left undiagnosed because the diagnosis "
                  r"budget \(0\.5 s, --diagnose-budget\) ran out before 1 row could be examined \(encode · m2\)")  # fmt: skip


def record(model: str, case: str, message: str) -> GateRecord:
    nodeid = f"specgate/gates/test_tokenizer.py::test_encode[{model}-{case}]"
    return GateRecord("encode", model, "fail", nodeid, message, case=case)


def test_a_run_whose_diagnosis_budget_ran_out_says_so_in_every_report(tmp_path: Path) -> None:
    records = [
        record("m1", "a", "ids differ at 0"),
        record("m2", "b", "ids differ at 3 (in a digit run)"),
        record("m2", "c", "ids differ at 1 (in a whitespace run)"),
    ]
    ticks = iter([0.0, 0.1, 9.0, 9.1, 9.2])  # the first row starts in time, the second does not
    asked: list[str] = []

    def no_row(stage, model_id, row, deadline):  # the row's own work: none, in time
        asked.append(model_id)
        return []

    diagnoser = Diagnoser(None, lambda r: None, lambda m: None, budget=0.5, clock=lambda: next(ticks))
    diagnoser._row = no_row  # type: ignore[method-assign]
    assert diagnoser.diagnose(records) == [] and asked == ["m1"]
    groups = triage.group_records(records)
    notes = triage.undiagnosed_notes(groups, diagnoser, DIAGNOSABLE_ROWS)
    assert len(notes) == 1 and NOTE.search(notes[0]), notes
    left = [g for g in groups if any(r.model == "m2" for r in g.records)]  # the row never examined
    assert NOTE.search(notes[0]).groups() == (str(len(left)), str(len(groups))) and 0 < len(left) < len(
        groups
    )

    state = SimpleNamespace(impl="cmd:x", records=records, groups=groups, diagnosis_notes=notes, verdict=[])
    written = reports.write_reports(state, tmp_path)
    by_suffix = {p.suffix: p.read_text(encoding="utf-8") for p in written if p.suffix != ".png"}
    assert NOTE.search(json.loads(by_suffix[".json"])["diagnosis_notes"][0])
    assert NOTE.search(re.sub(r"\\(.)", r"\1", by_suffix[".md"])), by_suffix[".md"]
    assert NOTE.search(by_suffix[".html"].replace("&#x27;", "'")), "the HTML report says it too"


def test_a_diagnosis_in_time_leaves_no_note() -> None:
    records = [record("m1", "a", "ids differ at 0")]
    diagnoser = Diagnoser(None, lambda r: None, lambda m: None, budget=60.0, clock=lambda: 0.0)
    diagnoser._row = lambda *a: []  # type: ignore[method-assign]
    diagnoser.diagnose(records)
    assert triage.undiagnosed_notes(triage.group_records(records), diagnoser, DIAGNOSABLE_ROWS) == []


def test_the_default_budget_is_one_number() -> None:
    """``--diagnose-budget``'s default is the diagnoser's (measured: a four-model tokenizer
    run took 99.5 s to diagnose on a busy 2-core machine; the default is that times 3)."""
    import argparse

    from specgate.diagnose.diagnoser import DEFAULT_BUDGET
    from specgate.parity import _Group
    from specgate.run.options import add_options

    parser = argparse.ArgumentParser()
    add_options(_Group(parser))  # type: ignore[arg-type]
    assert parser.get_default("diagnose_budget") == DEFAULT_BUDGET >= 3 * 99.5
