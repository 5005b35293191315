"""Tokenizer gates: the engine's pre-tokenizer split, encode (with and without
special-token parsing) and decode, per vocabulary model and corpus case, against
the recorded references (CPython ``regex`` for split, llama.cpp for encode/decode,
cross-checked with HF tokenizers and tiktoken; cases where those disagree are
reference disagreements, never engine failures). The comparisons are in
``specgate.checks.tokenizer``.

specgate's semantics are the GGUF pipeline's: no Unicode normalization, and
``parse_special`` passed explicitly.
"""

import pytest

from specgate.checks import tokenizer as checks
from specgate.gate import call, fail_if, reference_disagreement


@pytest.mark.gate("split")
def test_split(engine, model, model_id, case_id, case):
    got = call(engine, "split", model, case["text"])
    failure, disagreement = checks.check_split(case["text"], case["pieces"], got)
    if disagreement:
        reference_disagreement(disagreement)
    fail_if(failure, f"[split] model {model_id}, case {case_id}")


@pytest.mark.gate("encode")
def test_encode(engine, model, model_id, case_id, case):
    got = call(engine, "encode", model, case["text"], case["parse_special"])
    fail_if(
        checks.check_encode(case, got, show=checks.piece_of(model)),
        f"[encode] model {model_id}, case {case_id} (parse_special={case['parse_special']})",
    )


@pytest.mark.gate("decode")
def test_decode(engine, model, model_id, case_id, case):
    got = call(engine, "decode", model, case["ids"])
    fail_if(
        checks.check_decode(bytes.fromhex(case["hex"]), got), f"[decode] model {model_id}, case {case_id}"
    )
