"""Sample gate: the engine's sampler chain on the snapshot's logit windows vs llama.cpp's
sampler chain (documented order and semantics), candidate set and probabilities after
every step, then the final probabilities and the draw for the case's r."""

from __future__ import annotations

import pytest

from specgate.checks.sample import compare, logits_of
from specgate.gate import call, fail_if, reference_disagreement
from specgate.plugin import gate_params, snapshot_cases

pytestmark = pytest.mark.gate("sample")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if {"model_id", "case_id"} <= set(metafunc.fixturenames):
        metafunc.parametrize(("model_id", "case_id"), gate_params(metafunc.config, "sample"))


def shown(params: dict) -> dict:
    """Parameters for a message, a long penalty window abbreviated."""
    window = params.get("window", [])
    if len(window) > 10:
        return {**params, "window": f"{len(window)} ids, oldest {window[:2]} … newest {window[-3:]}"}
    return params


def test_sample(engine, model, model_id, case_id):
    case = snapshot_cases(model, "sample")[case_id]
    if "disagreement" in case:
        reference_disagreement(case["disagreement"])
    got = call(engine, "sample", logits_of(case), case["params"], case["r"])
    problem = compare(case, got)
    if problem is not None and case.get("llamacpp_native"):
        problem += f"\n  (note: {case['llamacpp_native']})"
    fail_if(problem, f"[sample] model {model_id}, case {case_id}, params {shown(case['params'])}")
