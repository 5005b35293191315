"""The gate cases run model by model (``specgate.run.selection.group_by_model``), and the
forward weights are dropped when the model changes (``specgate/gates/conftest.py``): each
model's weights are loaded once for all its stages, not once per stage module."""

from __future__ import annotations

from itertools import groupby

from tests.engines.parity_run import run_parity

MODELS = "tiny-qwen2-f32,tiny-qwen3-q8_0"
STAGES = "logits,trace,state_incremental"


def test_each_model_runs_its_stages_together_and_loads_its_weights_once(tmp_path):
    log = tmp_path / "loads.txt"
    run = run_parity(
        tmp_path, "tests.engines.counting_oracle:CountingOracle", STAGES, MODELS, "-p", "no:xdist",
        env={"COUNTING_ORACLE_LOG": str(log)},
    )  # fmt: skip
    assert run.status == 0, run.output[-3000:]
    cases = run.report["cases"]
    stages = {c["stage"].split("/")[0] for c in cases}
    assert stages == set(STAGES.split(",")), stages  # every stage gated, on both models
    # in run order: one block per model (stage by stage, it was a block per stage and model)
    blocks = [
        (model, {c["stage"].split("/")[0] for c in group})
        for model, group in groupby(cases, lambda c: c["model"])
    ]
    assert [m for m, _ in blocks] == MODELS.split(","), [m for m, _ in blocks]
    assert all(len(s) > 1 for _, s in blocks), blocks  # each block holds several stages
    loads = log.read_text(encoding="utf-8").split()
    assert sorted(loads) == sorted(MODELS.split(",")), loads  # once per model (it was once per stage module)
