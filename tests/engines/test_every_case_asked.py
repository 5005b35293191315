"""Every case is asked (``specgate.outcomes.judge``): a case the references disagree on is put to
the engine, and only an answer matching a recorded reference is a disagreement. The
engines are real external processes (``tests/engines/holes/``); what each case must
come to is derived from the snapshot's texts and recorded answers, not from the judge.

Decode is asked about ids at and past the vocabulary's edge too: an engine that aborts
on them (as llama.cpp's ``token_to_piece`` does) fails the run.
"""

from __future__ import annotations

import json
import shlex
import sys
import unicodedata
from pathlib import Path

import pytest

from specgate.upkeep import snapshots
from tests.engines.parity_run import run_parity, script_impl
from tests.engines.test_verdicts import HOLES, VOCAB, need

pytestmark = pytest.mark.slow  # each runs the gates in a subprocess over a whole stage (30-50 s)


def encode_cases() -> dict[str, dict]:
    return json.loads(snapshots.path_for(VOCAB, "encode").read_text(encoding="utf-8"))["cases"]


def by_case(run) -> dict[str, dict]:
    return {c["case"]: c for c in run.report["cases"]}


def test_an_nfc_normalizing_engine_fails_qwen3_vocab(tmp_path: Path) -> None:
    need(VOCAB)
    run = run_parity(tmp_path, script_impl(HOLES / "normalizes_input.py", "NFC"), "encode", VOCAB)
    assert run.status == 1, run.output[-3000:]
    cases, outcomes = encode_cases(), by_case(run)
    assert set(outcomes) == set(cases), "every case is asked"
    for case_id, case in cases.items():
        got = outcomes[case_id]
        nfc = unicodedata.normalize("NFC", case["text"])
        if nfc == case["text"] and "disagreement" not in case:
            assert got["outcome"] == "pass", (case_id, got)  # what NFC leaves alone, llama.cpp answers too
        elif (
            nfc != case["text"]
            and case.get("sources", {}).get("hf") is not None
            and "NFC" in case["disagreement"]
        ):
            # HF's tokenizer.json normalizes to NFC: the engine matches hf, not llama.cpp, the primary
            assert got["outcome"] == "reference-disagreement", (case_id, got)
            assert "matches HF tokenizers (hf), not llama.cpp" in got["message"], got["message"]
    # Where the text is not NFC and HF also matches the FIM token that llama.cpp's plain mode
    # leaves as text, the engine's ids are neither llama.cpp's nor HF's: a failure, so the run is red.
    fim = outcomes["special-fim-nfd/plain"]
    assert fim["outcome"] == "fail", fim
    assert "matches none of them" in fim["message"] and "ids differ from llama_tokenize" in fim["message"]
    assert outcomes["special-fim-nfd/special"]["outcome"] == "reference-disagreement"
    counts = run.outcomes()
    assert counts["fail"] == 1 and counts["pass"] + counts["reference-disagreement"] + 1 == len(cases), counts


def test_an_engine_answering_zero_has_nothing_in_the_disagree_column(tmp_path: Path) -> None:
    need(VOCAB)
    run = run_parity(tmp_path, script_impl(HOLES / "answers_zero.py"), "encode", VOCAB)
    assert run.status == 1, run.output[-3000:]
    cases = encode_cases()
    assert not any(c["ids"] == [0] for c in cases.values())  # no case's reference answer is [0]
    # every case fails, or errors where [0] is more ids than the text has bytes (impl.bounds)
    counts = run.outcomes()
    assert set(counts) <= {"fail", "error"} and sum(counts.values()) == len(cases), counts
    row = next(r for r in run.report["matrix"] if r["stage"] == "encode" and r["model"] == VOCAB)
    assert row.get("reference-disagreement", 0) == 0, row
    disputed = [
        c for c in by_case(run).items() if "disagreement" in cases[c[0]] and c[1]["outcome"] == "fail"
    ]
    assert len(disputed) >= 20
    assert all("matches none of them" in c["message"] for _, c in disputed), disputed[0]


def test_an_answer_matching_neither_reference_fails(tmp_path: Path) -> None:
    need(VOCAB)
    run = run_parity(
        tmp_path, script_impl(HOLES / "normalizes_input.py", "NFD"), "encode", VOCAB, "-k", "combining"
    )
    assert run.status == 1, run.output[-3000:]
    cases, outcomes = encode_cases(), by_case(run)
    neither = [
        cid
        for cid, c in cases.items()
        if cid.startswith("combining")
        and unicodedata.normalize("NFD", c["text"])
        not in (c["text"], unicodedata.normalize("NFC", c["text"]))
    ]
    # Another text has other bytes, so other ids: the NFD answer is neither llama.cpp's nor HF's (NFC).
    assert neither and all("disagreement" in cases[cid] for cid in neither)
    for cid in neither:
        assert outcomes[cid]["outcome"] == "fail", outcomes[cid]
        assert (
            "matches none of them: not llama.cpp, the primary reference, nor HF tokenizers"
            in outcomes[cid]["message"]
        )


def test_decode_asks_past_the_vocabulary_and_an_aborting_engine_fails(tmp_path: Path) -> None:
    need(VOCAB)
    decode = json.loads(snapshots.path_for(VOCAB, "decode").read_text(encoding="utf-8"))["cases"]
    n_vocab = decode["ids-edge-last-id"]["ids"][0] + 1  # recorded by llama.cpp
    outside = {cid for cid, c in decode.items() if any(i >= n_vocab for i in c["ids"])}
    assert {"ids-edge-999999", "ids-edge-n-vocab", "ids-edge-n-vocab-plus-1"} <= outside
    assert any(999999 in decode[cid]["ids"] and len(decode[cid]["ids"]) > 1 for cid in outside)

    run = run_parity(
        tmp_path / "abort", script_impl(HOLES / "decode_aborts_past_vocabulary.py"), "decode", VOCAB
    )
    assert run.status == 1, run.output[-3000:]
    outcomes = by_case(run)
    errors = {cid for cid, c in outcomes.items() if c["outcome"] == "error"}
    # the engine dies on each id past the vocabulary it is asked; three deaths in a row cut the
    # row short (the rest of it is an error, not asked: specgate.run.crashloop)
    asked = {cid for cid in errors if "not asked" not in outcomes[cid]["message"]}
    assert asked and asked <= outside, sorted(asked - outside)
    assert all("not asked" in outcomes[cid]["message"] for cid in errors - outside)
    assert all(c["outcome"] == "pass" for cid, c in outcomes.items() if cid not in errors), run.outcomes()

    served = "cmd:" + shlex.join([sys.executable, "-m", "specgate.cli", "engine", "--impl", "oracle"])
    oracle = run_parity(tmp_path / "oracle", served, "decode", VOCAB, "-k", "edge")
    assert oracle.status == 0, oracle.output[-3000:]
    assert oracle.outcomes() == {"pass": len([c for c in decode if c.startswith("ids-edge")])}, (
        oracle.outcomes()
    )
