"""Tokenizer gates: the engine's pre-tokenizer split, encode (with and without
special-token parsing) and decode, per vocabulary model and corpus case, against
the recorded references (CPython ``regex`` for split, llama.cpp for encode/decode,
cross-checked with HF tokenizers and tiktoken; cases where those disagree are
reference disagreements, never engine failures).

specgate's semantics are the GGUF pipeline's: no Unicode normalization, and
``parse_special`` passed explicitly.
"""

from __future__ import annotations

from typing import Any

import pytest

from specgate.gate import call, first_divergence, reference_disagreement
from specgate.plugin import gate_params, snapshot_cases


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if {"model_id", "case_id"} <= set(metafunc.fixturenames):
        stage = metafunc.definition.get_closest_marker("gate").args[0]
        metafunc.parametrize(("model_id", "case_id"), gate_params(metafunc.config, stage))


def excerpt(text: str, at: int, width: int = 24) -> str:
    return repr(text[max(0, at - width) : at + width])


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
    text, expected = case["text"], case["pieces"]
    got = call(engine, "split", model, text)
    joined = "".join(got)
    assert joined == text, (
        f"[split] model {model_id}, case {case_id}: pieces do not tile the input; they join to "
        f"{excerpt(joined, 0)} (length {len(joined)}) for {excerpt(text, 0)} (length {len(text)})"
    )
    where = first_divergence(expected, got)
    if where is not None:
        offset = len("".join(p for p, q in zip(expected, got, strict=False) if p == q))
        pytest.fail(
            f"[split] model {model_id}, case {case_id}: pieces differ from regex.findall of the "
            f"tokenizer-file pattern near text offset {offset} ({excerpt(text, offset)})\n{where}",
            pytrace=False,
        )


@pytest.mark.gate("encode")
def test_encode(engine, model, model_id, case_id):
    check_encode(engine, model, model_id, case_id, snapshot_cases(model, "encode")[case_id])


def check_encode(engine: Any, model: Any, model_id: str, case_id: str, case: dict[str, Any]) -> None:
    """The encode comparison for one case: ``{"text", "parse_special", "ids"}`` from the reference."""
    if "disagreement" in case:
        reference_disagreement(case["disagreement"])
    got = call(engine, "encode", model, case["text"], case["parse_special"])
    where = first_divergence(case["ids"], got, show=piece_of(model))
    if where is not None:
        pytest.fail(
            f"[encode] model {model_id}, case {case_id} (parse_special={case['parse_special']}): ids differ "
            f"from llama_tokenize on text {excerpt(case['text'], 0, 40)}\n{where}",
            pytrace=False,
        )


@pytest.mark.gate("decode")
def test_decode(engine, model, model_id, case_id):
    case = snapshot_cases(model, "decode")[case_id]
    if "disagreement" in case:
        reference_disagreement(case["disagreement"])
    expected = bytes.fromhex(case["hex"])
    got = call(engine, "decode", model, case["ids"])
    if got != expected:
        at = next(
            (k for k, (a, b) in enumerate(zip(expected, got, strict=False)) if a != b),
            min(len(got), len(expected)),
        )
        pytest.fail(
            f"[decode] model {model_id}, case {case_id}: bytes differ from concatenated llama_token_to_piece "
            f"at byte {at} (reference length {len(expected)}, engine length {len(got)})\n"
            f"  reference: {expected[max(0, at - 16) : at + 16]!r}\n  engine:    {got[max(0, at - 16) : at + 16]!r}",
            pytrace=False,
        )
