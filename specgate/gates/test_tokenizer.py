"""Tokenizer gates: the engine's pre-tokenizer split, encode (with and without
special-token parsing) and decode, per vocabulary model and corpus case, against
the recorded references (CPython ``regex`` for split, llama.cpp for encode/decode,
cross-checked with HF tokenizers and tiktoken). Every case is asked: an answer
matching only a cross-check where the references disagree is a reference
disagreement naming it, one matching none fails (``specgate.outcomes.judge``). The
comparisons and their settling are in ``specgate.checks.tokenizer``.

specgate's semantics are the GGUF pipeline's: no Unicode normalization, and
``parse_special`` passed explicitly.
"""

import pytest

from specgate.checks import tokenizer as checks
from specgate.outcomes.gate import call
from specgate.run.case_answers import keep


@pytest.mark.gate("split")
def test_split(engine, model, model_id, case_id, case, request):
    got = call(engine, "split", model, case["text"])
    keep(request, got)
    checks.settle_case("split", model, case, got, f"[split] model {model_id}, case {case_id}")


@pytest.mark.gate("encode")
def test_encode(engine, model, model_id, case_id, case, request):
    got = call(engine, "encode", model, case["text"], case["parse_special"])
    keep(request, got)
    where = f"[encode] model {model_id}, case {case_id} (parse_special={case['parse_special']})"
    checks.settle_case("encode", model, case, got, where)


@pytest.mark.gate("decode")
def test_decode(engine, model, model_id, case_id, case, request):
    got = call(engine, "decode", model, case["ids"])
    keep(request, got)
    checks.settle_case("decode", model, case, got, f"[decode] model {model_id}, case {case_id}")
