"""Metadata / dispatch gate: the engine's reading of each model vs transformers' GGUF
config conversion and llama.cpp's reported parameters (one case per field)."""

from __future__ import annotations

from typing import Any

import pytest

from specgate.gate import call, not_applicable, reference_disagreement
from specgate.plugin import gate_params, snapshot_cases

pytestmark = pytest.mark.gate("metadata")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if {"model_id", "case_id"} <= set(metafunc.fixturenames):
        metafunc.parametrize(("model_id", "case_id"), gate_params(metafunc.config, "metadata"))


_engine_answers: dict[tuple[str, str], dict[str, Any]] = {}


def engine_field(engine: Any, model: Any, field: str) -> Any:
    key = (engine.name, model.id)
    if key not in _engine_answers:
        _engine_answers[key] = call(engine, "metadata", model)
    value: Any = _engine_answers[key]
    for part in field.split("."):
        if not isinstance(value, dict) or part not in value:
            not_applicable(f"{engine.name} reports no {field!r}")
        value = value[part]
    return value


def test_metadata(engine, model, model_id, case_id):
    case = snapshot_cases(model, "metadata")[case_id]
    if "disagreement" in case:
        reference_disagreement(case["disagreement"])
    got = engine_field(engine, model, case_id)
    assert got == case["value"], (
        f"[metadata] model {model_id}, field {case_id}: engine says {got!r}, "
        f"references say {case['value']!r} ({', '.join(f'{k}={v!r}' for k, v in case['sources'].items())})"
    )
