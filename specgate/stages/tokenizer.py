"""The tokenizer stages: split (pre-tokenizer pieces), encode (token ids) and decode
(bytes). The gates (``specgate/gates/test_tokenizer.py``) and a replay on a new input judge
with the same comparisons (``specgate.checks.tokenizer``); a replay's reference is the
oracle, and its messages say so. Their cases are built from the references by
``specgate.stages.tokenizer_cases``."""

from __future__ import annotations

from typing import Any

from specgate.stages.base import Stage, Verdict
from specgate.stages.tokenizer_cases import decode_cases, encode_cases, split_cases


def replay_split(engine: Any, oracle: Any, model: Any, inp: dict[str, Any], _cls: str = "") -> Verdict:
    from specgate.checks import tokenizer
    from specgate.outcomes.gate import call

    expected = oracle.split(model, inp["text"])
    got = call(engine, "split", model, inp["text"])
    failure, disagreement = tokenizer.check_split(inp["text"], expected, got, tokenizer.ORACLE)
    outcome = "fail" if failure else "reference-disagreement" if disagreement else "pass"
    return Verdict(outcome, failure or disagreement or "", list(got), expected)


def replay_encode(engine: Any, oracle: Any, model: Any, inp: dict[str, Any], _cls: str = "") -> Verdict:
    from specgate.checks import tokenizer
    from specgate.outcomes.gate import call

    expected = oracle.encode(model, inp["text"], inp["parse_special"])
    got = call(engine, "encode", model, inp["text"], inp["parse_special"])
    show = lambda i: repr(oracle.decode(model, [i]))  # noqa: E731 — a token id shown as its bytes
    failure = tokenizer.check_encode({**inp, "ids": expected}, got, show=show, reference=tokenizer.ORACLE)
    return Verdict("fail" if failure else "pass", failure or "", list(got), expected)


def replay_decode(engine: Any, oracle: Any, model: Any, inp: dict[str, Any], _cls: str = "") -> Verdict:
    from specgate.checks import tokenizer
    from specgate.outcomes.gate import call

    expected = oracle.decode(model, inp["ids"])
    got = call(engine, "decode", model, inp["ids"])
    failure = tokenizer.check_decode(expected, bytes(got), tokenizer.ORACLE)
    return Verdict("fail" if failure else "pass", failure or "", bytes(got).hex(), expected.hex())


SPLIT = Stage(
    "split", capability="split", snapshot="split", replay=replay_split, build=split_cases,
    case_input=lambda case, _constructs: {"text": case["text"]},
)  # fmt: skip
ENCODE = Stage(
    "encode", capability="encode", snapshot="encode", replay=replay_encode, build=encode_cases,
    case_input=lambda case, _constructs: {"text": case["text"], "parse_special": case["parse_special"]},
)  # fmt: skip
DECODE = Stage(
    "decode", capability="decode", snapshot="decode", replay=replay_decode, build=decode_cases,
    case_input=lambda case, _constructs: {"ids": list(case["ids"])},
)  # fmt: skip
