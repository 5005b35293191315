"""Re-check the state snapshots' library references live, on a sample: tiny-qwen2-f32's
``state_incremental`` and ``state_conversation`` cases played again on transformers'
``DynamicCache`` and llama.cpp's KV cache, and each one-shot row computed again
(``specgate.stages.state_references.add``); every live record must agree with the stored
one by the gate it feeds (transformers by ``exact``, llama.cpp by ``quantized``: a snapshot
recorded on one CPU meets other last bits on another). The fast tier holds the oracle to the
stored records (``tests/stages/test_state_references.py``). A change means a reference
moved: re-record with ``python -m specgate.stages.state_cases MODEL``."""

from __future__ import annotations

import copy

import pytest

from specgate.checks import state
from specgate.stages import state_cases, state_references
from specgate.upkeep import snapshots

#: The sample re-played live (under a minute on two busy cores; the 0.5B model's recording is
#: ``python -m specgate.stages.state_cases qwen2.5-coder-0.5b-instruct``).
SAMPLE = "tiny-qwen2-f32"

pytestmark = [
    pytest.mark.live,
    pytest.mark.applies_to.with_args(lambda model_id, _model_of: model_id == SAMPLE, models=True),
]


def test_transformers_and_llama_cpp_still_play_the_state_cases_as_recorded(reference, model, model_id):
    engines = {"hf": reference("hf"), "llamacpp": reference("llamacpp")}
    stored = {stage: snapshots.load(model, stage) for stage in state_references.SNAPSHOTS}
    live = copy.deepcopy(stored)
    for stage, cases in live.items():
        for case in cases.values():
            for point in state_references.points(stage, case):
                point.pop("references", None)
    state_references.add(model, live, state_cases.oracle_one_shot(model), engines)
    problems = []
    for stage in state_references.SNAPSHOTS:
        for case_id, case in live[stage].items():
            pairs = zip(
                state_references.points(stage, stored[stage][case_id]), state_references.points(stage, case),
                strict=True,
            )  # fmt: skip
            for number, (was, now) in enumerate(pairs, 1):
                for name, (conformance_class, _) in state_references.LIBRARIES.items():
                    for form in ("played", "one_shot"):
                        failure, _ = state.judge_record(
                            conformance_class, model_id, now["ids"], was["references"][name][form],
                            now["references"][name][form],
                        )  # fmt: skip
                        if failure:
                            problems.append(f"{stage}/{case_id} point {number} {name} {form}: {failure}")
    assert not problems, (
        f"{len(problems)} drifted, first: {problems[0]}; re-record: python -m specgate.stages.state_cases {model_id}"
    )
