"""Tokenizer gates: the engine's pre-tokenizer split, encode (with and without
special-token parsing) and decode, per vocabulary model and corpus case, against
the recorded references (CPython ``regex`` for split, llama.cpp for encode/decode,
cross-checked with HF tokenizers and tiktoken). Every case is asked: an answer
matching only a cross-check where the references disagree is a reference
disagreement naming it, one matching none fails (``specgate.run.judge``). The
comparisons are in ``specgate.checks.tokenizer``.

specgate's semantics are the GGUF pipeline's: no Unicode normalization, and
``parse_special`` passed explicitly.
"""

import pytest

from specgate.checks import tokenizer as checks
from specgate.run.case_answers import keep
from specgate.run.gate import call
from specgate.run.judge import settle


@pytest.mark.gate("split")
def test_split(engine, model, model_id, case_id, case, request):
    got = call(engine, "split", model, case["text"])
    keep(request, got)
    settle(
        "split",
        case,
        lambda c: checks.check_split(c["text"], c["pieces"], got, skew=False)[0],
        f"[split] model {model_id}, case {case_id}",
        "pieces",
    )


@pytest.mark.gate("encode")
def test_encode(engine, model, model_id, case_id, case, request):
    got = call(engine, "encode", model, case["text"], case["parse_special"])
    keep(request, got)
    settle(
        "encode",
        case,
        lambda c: checks.check_encode(c, got, show=checks.piece_of(model)),
        f"[encode] model {model_id}, case {case_id} (parse_special={case['parse_special']})",
        "ids",
    )


@pytest.mark.gate("decode")
def test_decode(engine, model, model_id, case_id, case, request):
    got = call(engine, "decode", model, case["ids"])
    keep(request, got)
    settle(
        "decode",
        case,
        lambda c: checks.check_decode(bytes.fromhex(c["hex"]), got),
        f"[decode] model {model_id}, case {case_id}",
        "hex",
    )
