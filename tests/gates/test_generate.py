"""Generate gate: greedy continuations vs llama.cpp's and transformers' streams
(divergences at near-ties classified, not failed), and stop-string cases with known
answers (a stop string split across tokens; a character split across tokens before
a stop) including the streamed chunks when the engine reports them."""

from __future__ import annotations

import pytest

from impl.protocol import Unsupported
from specgate import generation
from specgate.gate import call, not_applicable, reference_disagreement
from specgate.plugin import gate_params, snapshot_cases

pytestmark = pytest.mark.gate("generate")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if {"model_id", "case_id"} <= set(metafunc.fixturenames):
        metafunc.parametrize(("model_id", "case_id"), gate_params(metafunc.config, "generate"))


def test_generate(engine, model, model_id, case_id, request):
    case = snapshot_cases(model, "generate")[case_id]
    if "disagreement" in case:
        reference_disagreement(case["disagreement"])
    try:
        got = call(engine, "generate", model, case["prompt"], case["params"])
    except Unsupported as exc:
        not_applicable(str(exc))
    label = f"[generate] model {model_id}, case {case_id}"
    text = f"\n  engine text: {bytes.fromhex(got['bytes'])!r}"

    if "references" in case:  # a greedy stream
        for name, ref in case["references"].items():
            failure, near_tie = generation.compare_greedy(ref, got, generation.tie_tolerance(model_id, name))
            assert failure is None, f"{label}: engine departs from {name}'s greedy stream: {failure}{text}"
            if near_tie:
                request.node.user_properties.append(("metric:near_tie", f"{name}: {near_tie}"))
        return

    ref = case["reference"]  # a stop-string case: the stream must first follow the reference
    diverge = next((k for k, (a, b) in enumerate(zip(ref["ids"], got["ids"], strict=False)) if a != b), None)
    if diverge is not None and ref["margins"][diverge] <= generation.tie_tolerance(model_id, "llamacpp"):
        request.node.user_properties.append(
            ("metric:near_tie", f"stream parts from the reference at near-tie step {diverge}")
        )
        return
    problem = generation.compare_stop_case(case, got)
    assert problem is None, f"{label}, stop {case['params']['stop']!r}: {problem}{text}"
