"""A state diagnosis read back from a parity run's reports: ``specgate parity`` gates a
mutant with one planted state bug (``tests/engines/mutants/state_bugs.py``, a real ``cmd:``
process) and its JSON and Markdown reports name the cause. That every state diagnosis of the
catalogue names its planted bug, that a look-alike is not diagnosed and that the oracle is
diagnosed with nothing is ``tests/engines/test_state_mutants.py``'s (each mutant's cases
played once for the stages' verdicts and the diagnoses).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.engines.parity_run import run_parity, script_impl
from tests.engines.test_state_mutants import CAUSE, MODEL, MUTANTS


@pytest.fixture(scope="module")
def model(tiny_model: Any) -> Any:
    return tiny_model


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
