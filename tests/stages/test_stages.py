"""The stage as one object (``specgate.stages``): the gates, the replay of triage and
the search read one registry, and one rule judges a case in the gate and in a replay."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from impl.oracle import OracleEngine
from impl.protocol import Engine
from specgate import stages
from specgate.gates import test_render as render_gate
from specgate.outcomes.gate import NotApplicable
from specgate.run import triage
from specgate.search.searchable import QUANTIZED_GENERATE, QUANTIZED_LOGITS, SEARCHABLE
from specgate.upkeep import corpus, snapshots
from tests.child_pytest import planted_pytest
from tests.gate_request import gate_request

ROOT = Path(__file__).resolve().parents[2]


class OwnTemplatesOnly(Engine):
    """Renders its models' own templates (the oracle's renders) and offers no ``render_template``."""

    name = "own-templates-only"

    def render(self, model, messages, add_generation_prompt=True, **kwargs):
        return OracleEngine().render(model, messages, add_generation_prompt, **kwargs)


def test_a_construct_is_na_alike_in_the_gate_and_in_a_replay() -> None:
    """An engine without ``render_template`` is n/a for a construct template in the gate; a
    replay of the same case (triage, ``specgate repro``, the search) says the same, by the
    same rule — it used to call the missing method and report the engine's error."""
    model = corpus.constructs_model()
    cases = snapshots.load(model, stages.CONSTRUCTS_SNAPSHOT)
    case_id = next(iter(cases))
    case = cases[case_id]
    with pytest.raises(NotApplicable, match="no render_template entry point"):
        render_gate.test_render_template(OwnTemplatesOnly(), case_id, case, request=gate_request())
    inp = stages.STAGES["render"].case_input(case, True)
    verdict = triage.recheck("render", OwnTemplatesOnly(), OracleEngine(), model, inp)
    assert verdict.outcome == "n/a", verdict
    assert "no render_template entry point" in verdict.message
    assert triage.recheck("render", OracleEngine(), OracleEngine(), model, inp).outcome == "pass"


def test_every_gate_names_a_registered_stage_and_every_stage_is_gated() -> None:
    marked = set()
    for path in sorted((ROOT / "specgate" / "gates").glob("test_*.py")):
        marked |= set(re.findall(r"pytest\.mark\.gate\(\"(\w+)\"", path.read_text(encoding="utf-8")))
    assert marked == set(stages.GATE_STAGES)
    recorded = {p.stem for p in (ROOT / "snapshots").glob("*/*.json")}
    assert {s.snapshot for s in stages.STAGES.values()} <= recorded
    assert stages.CONSTRUCTS_SNAPSHOT in recorded


def test_the_search_replays_every_stage_as_a_registered_row() -> None:
    for stage in [*SEARCHABLE.values(), QUANTIZED_LOGITS, QUANTIZED_GENERATE]:
        assert stage.gate_stage in stages.REPLAYABLE_FILES, stage.name
        assert stage.capability == stages.stage_of(stage.gate_stage).capability


def test_the_rows_replayed_from_recorded_cases_are_the_ones_that_carry_an_input() -> None:
    assert set(stages.REPLAYABLE) == {
        "split",
        "encode",
        "decode",
        "render",
        "logits/exact",
        "logits/quantized",
        "state_incremental/exact",
        "state_incremental/quantized",
    }
    assert set(stages.REPLAYABLE_FILES) == {
        *stages.REPLAYABLE, "sample", "generate/exact", "generate/quantized"
    }  # fmt: skip


PLANTED = """
import pytest

@pytest.mark.gate("encdoe")
def test_misspelt(engine, model, model_id, case_id, case):
    pass
"""


def test_a_gate_naming_an_unknown_stage_is_a_usage_error(tmp_path: Path) -> None:
    """A misspelt stage used to parametrize nothing (one silent skip); now it stops the run."""
    (tmp_path / "test_planted.py").write_text(PLANTED, encoding="utf-8")
    proc = planted_pytest(
        tmp_path, "-p", "no:xdist", "--impl", "oracle", "--models", "qwen3-vocab", tmp_path, timeout=120
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 4, out[-2000:]
    assert "gate marker names an unknown stage 'encdoe'" in out, out[-2000:]
    assert "Traceback" not in out, out[-2000:]
