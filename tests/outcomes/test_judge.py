"""``specgate.outcomes.judge`` on recorded cases: an answer is judged by the stage's primary
reference first, then by the other references the snapshot recorded. The answers are
the references' own recorded ones (and one no reference gave), so the expected
outcome of each is known without the judge."""

from __future__ import annotations

import json

import pytest

from specgate.checks.tokenizer import check_decode, check_encode
from specgate.outcomes.judge import PRIMARY, judge
from specgate.upkeep import snapshots

NFC_CASE = ("qwen3-vocab", "encode", "combining-acute/plain")  # HF's tokenizer.json normalizes to NFC
EDGE_CASE = ("deepseek-r1-distill-qwen-7b-vocab", "decode", "ids-edge-n-vocab")  # HF names id n_vocab


def recorded(model: str, stage: str, case_id: str) -> dict:
    return json.loads(snapshots.path_for(model, stage).read_text(encoding="utf-8"))["cases"][case_id]


def encode_verdict(case: dict, answer: list[int]) -> tuple[str | None, str | None]:
    return judge("encode", case, lambda c: check_encode(c, answer), "ids")


def test_the_primary_references_answer_passes():
    case = recorded(*NFC_CASE)
    assert PRIMARY["encode"] == "llamacpp"
    assert encode_verdict(case, case["ids"]) == (None, None)


def test_another_references_answer_is_a_disagreement_naming_it():
    case = recorded(*NFC_CASE)
    assert case["sources"]["hf"] != case["ids"]
    failure, disagreement = encode_verdict(case, case["sources"]["hf"])
    assert failure is None
    assert disagreement.startswith(
        "the engine matches HF tokenizers (hf), not llama.cpp, the primary reference"
    )
    assert "NFC" in disagreement  # why the references disagree


@pytest.mark.parametrize("answer", [[0], []])
def test_an_answer_no_reference_gave_fails_against_the_primary(answer):
    case = recorded(*NFC_CASE)
    failure, disagreement = encode_verdict(case, answer)
    assert disagreement is None
    assert failure.startswith("ids differ from llama_tokenize")  # the primary's first divergence
    assert "matches none of them: not llama.cpp, the primary reference, nor HF tokenizers" in failure


def test_a_case_the_references_agree_on_is_not_a_disagreement_whatever_the_answer():
    case = recorded("qwen3-vocab", "encode", "zh-mixed-ascii/plain")
    assert "disagreement" not in case
    failure, disagreement = encode_verdict(case, [0])
    assert disagreement is None and "matches none" not in failure


def test_decode_past_the_vocabulary_judged_by_its_sources():
    case = recorded(*EDGE_CASE)

    def verdict(answer: bytes):
        return judge("decode", case, lambda c: check_decode(bytes.fromhex(c["hex"]), answer), "hex")

    assert verdict(b"") == (None, None)  # skipped, as PROTOCOL 4.2 says (llama.cpp's bytes of no ids)
    failure, disagreement = verdict(bytes.fromhex(case["sources"]["hf"]))
    assert failure is None and "(hf), not llama.cpp" in disagreement
    failure, disagreement = verdict(b"?")
    assert disagreement is None and "matches none of them" in failure


def test_split_on_a_unicode_skew_text_is_judged_by_the_recorded_pieces():
    from specgate.checks.tokenizer import check_split

    case = recorded("qwen3-vocab", "split", "unicode-newly-assigned")

    def verdict(pieces: list[str]):
        return judge(
            "split", case, lambda c: check_split(c["text"], c["pieces"], pieces, skew=False)[0], "pieces"
        )

    assert verdict(case["pieces"]) == (None, None)  # CPython regex, the primary
    failure, disagreement = verdict(case["sources"]["hf"])  # HF's older Unicode tables
    assert failure is None and "(hf), not CPython regex" in disagreement
    failure, disagreement = verdict([case["text"]])  # tiles the text, but no reference split it so
    assert disagreement is None and "matches none of them" in failure
