"""Metadata / dispatch gate: the engine's reading of each model vs transformers' GGUF
config conversion and llama.cpp's reported parameters (one case per field; the
engine is asked once per model). The comparison is ``specgate.checks.metadata``."""

from __future__ import annotations

import pytest

from specgate.checks.metadata import check_field
from specgate.gate import call, fail_if, reference_disagreement
from specgate.plugin import gate_params, snapshot_cases

pytestmark = pytest.mark.gate("metadata")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if {"model_id", "case_id"} <= set(metafunc.fixturenames):
        metafunc.parametrize(("model_id", "case_id"), gate_params(metafunc.config, "metadata"))


def test_metadata(engine, specgate, model, model_id, case_id):
    case = snapshot_cases(model, "metadata")[case_id]
    if "disagreement" in case:
        reference_disagreement(case["disagreement"])
    answer = specgate.answers.get(("metadata", model.id), lambda: call(engine, "metadata", model))
    fail_if(check_field(answer, case_id, case), f"[metadata] model {model_id}, field {case_id}")
