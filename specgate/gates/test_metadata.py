"""Metadata / dispatch gate: the engine's reading of each model vs transformers' GGUF
config conversion and llama.cpp's reported parameters (one case per field; the
engine is asked once per model). The comparison is ``specgate.checks.metadata``."""

import pytest

from specgate.checks.metadata import check_field
from specgate.outcomes.gate import call
from specgate.outcomes.judge import settle

pytestmark = pytest.mark.gate("metadata")


def test_metadata(engine, specgate, model, model_id, case_id, case):
    answer = specgate.answers.get(("metadata", model.id), lambda: call(engine, "metadata", model))
    settle(
        "metadata",
        case,
        lambda c: check_field(answer, case_id, c),
        f"[metadata] model {model_id}, field {case_id}",
        "value",
    )
