"""Tokenizer gates: the engine's pre-tokenizer split, encode (with and without
special-token parsing) and decode, per vocabulary model and corpus case, against
the recorded references (CPython ``regex`` for split, llama.cpp for encode/decode,
cross-checked with HF tokenizers and tiktoken; cases where those disagree are
reference disagreements, never engine failures). The comparisons are in
``specgate.checks.tokenizer``.

specgate's semantics are the GGUF pipeline's: no Unicode normalization, and
``parse_special`` passed explicitly.
"""

from __future__ import annotations

from typing import Any

import pytest

from specgate.checks import tokenizer as checks
from specgate.gate import call, fail_if, reference_disagreement
from specgate.plugin import gate_params, snapshot_cases


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if {"model_id", "case_id"} <= set(metafunc.fixturenames):
        stage = metafunc.definition.get_closest_marker("gate").args[0]
        metafunc.parametrize(("model_id", "case_id"), gate_params(metafunc.config, stage))


def piece_of(model: Any) -> Any:
    """Render a token id as the bytes it stands for (display only; via the oracle's table)."""
    from impl.oracle import OracleEngine

    try:
        oracle = OracleEngine()
        oracle.decode(model, [])
    except Exception:
        return repr
    return lambda i: repr(oracle.decode(model, [i]))


@pytest.mark.gate("split")
def test_split(engine, model, model_id, case_id):
    case = snapshot_cases(model, "split")[case_id]
    if "disagreement" in case:
        reference_disagreement(case["disagreement"])
    failure, disagreement = checks.check_split(
        case["text"], case["pieces"], call(engine, "split", model, case["text"])
    )
    if disagreement:
        reference_disagreement(disagreement)
    fail_if(failure, f"[split] model {model_id}, case {case_id}")


@pytest.mark.gate("encode")
def test_encode(engine, model, model_id, case_id):
    check_encode(engine, model, model_id, case_id, snapshot_cases(model, "encode")[case_id])


def check_encode(engine: Any, model: Any, model_id: str, case_id: str, case: dict[str, Any]) -> None:
    """The encode gate for one case (also run by the oracle's mutation tests)."""
    if "disagreement" in case:
        reference_disagreement(case["disagreement"])
    got = call(engine, "encode", model, case["text"], case["parse_special"])
    fail_if(
        checks.check_encode(case, got, show=piece_of(model)),
        f"[encode] model {model_id}, case {case_id} (parse_special={case['parse_special']})",
    )


@pytest.mark.gate("decode")
def test_decode(engine, model, model_id, case_id):
    case = snapshot_cases(model, "decode")[case_id]
    if "disagreement" in case:
        reference_disagreement(case["disagreement"])
    got = call(engine, "decode", model, case["ids"])
    fail_if(
        checks.check_decode(bytes.fromhex(case["hex"]), got), f"[decode] model {model_id}, case {case_id}"
    )
