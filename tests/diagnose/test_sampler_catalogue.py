"""The sampler and generate catalogues' ground: with no knob the deviated sampler and
decode loop are the oracle's and reproduce the recorded references (llama.cpp's sampler
chain; llama.cpp's and transformers' streams and the known stop answers), and every
hypothesis shows on some case of the corpus — one the corpus cannot tell from correct
behaviour must not be in the catalogue."""

from __future__ import annotations

import pytest

from oracle import sampler as oracle_sampler
from specgate.checks import sample as sample_checks
from specgate.diagnose import generate, sampler
from specgate.diagnose.generate import GenerateAnswer
from specgate.diagnose.sampler import SampleAnswer
from specgate.diagnose.tokenizer import of_stage
from specgate.supply import models
from specgate.upkeep import snapshots

MODEL = "tiny-qwen2-f32"


def _sample_cases() -> dict[str, dict]:
    return snapshots.load(models.model_ref(MODEL), "sample")


def _inp(case: dict) -> dict:
    return {"logits": case["logits"], "params": case["params"], "r": case["r"]}


@pytest.mark.slow  # the oracle's chain over whole vocabularies: ~2 s of CPU, 13 s on the loaded machine
def test_without_knobs_the_deviated_sampler_is_the_oracle_and_reproduces_llamacpp() -> None:
    cases = _sample_cases()
    assert len(cases) > 60
    for case_id, case in cases.items():
        got = sampler.answer("sample", None, _inp(case), {})
        oracle = oracle_sampler.sample(sample_checks.logits_of(case), case["params"], case["r"])
        assert got == SampleAnswer(oracle, case["r"]), case_id
        assert got.result["token"] == oracle["token"] and got.result["ids"] == oracle["ids"], case_id
        if "disagreement" not in case:  # the recorded llama.cpp chain, as the gate compares it
            assert sample_checks.compare(case, got.result) is None, case_id


def test_every_sampler_hypothesis_shows_on_some_case_of_the_corpus() -> None:
    cases = _sample_cases()
    for h in sampler.CATALOGUE:
        shows = [
            case_id
            for case_id, case in cases.items()
            if sampler.answer("sample", None, _inp(case), dict(h.knobs))
            != sampler.answer("sample", None, _inp(case), {})
        ]
        assert shows, f"{h.name}: the corpus cannot tell it from the documented chain"


def test_a_sampler_answer_is_compared_as_the_gate_compares_it() -> None:
    case = _sample_cases()["crafted-quarters/top-p-exact-0.75"]
    base = sampler.answer("sample", None, _inp(case), {})
    nudged = {**base.result, "probs": [p + 0.5 * sample_checks.PROB_TOL for p in base.result["probs"]]}
    assert SampleAnswer(nudged, case["r"]) == base  # within the gate's probability tolerance
    moved = {**base.result, "probs": [p + 3 * sample_checks.PROB_TOL for p in base.result["probs"]]}
    assert SampleAnswer(moved, case["r"]) != base
    assert SampleAnswer({"steps": "garbage"}, case["r"]) != base  # a malformed answer equals nothing


@pytest.mark.slow  # the tiny model's forward: ~20 s of CPU for the eleven recorded cases
def test_without_knobs_the_deviated_decode_loop_is_the_oracle_and_reproduces_the_references() -> None:
    from impl.oracle import OracleEngine

    model = models.model_ref(MODEL)
    m = generate.reference(model)
    cases = snapshots.load(model, "generate")
    for case_id, case in cases.items():
        inp = {"prompt": case["prompt"], "params": case["params"]}
        tokens = m.tokens(inp)
        got = generate.loop(tokens, m.piece, case["params"], m.stop_tokens, {})
        oracle = OracleEngine().generate(model, case["prompt"], case["params"])
        assert {k: got[k] for k in ("ids", "bytes", "finish_reason", "chunks")} == {
            k: oracle[k] for k in ("ids", "bytes", "finish_reason", "chunks")
        }, case_id
        if "expected" in case:
            assert case["expected"] == {
                "bytes": got["bytes"], "finish_reason": got["finish_reason"], "n_ids": len(got["ids"])
            }, case_id  # fmt: skip
        else:
            assert got["ids"] == case["references"]["transformers"]["ids"], case_id
        for h in of_stage(generate.CATALOGUE, "generate/exact"):
            if generate.applies("generate/exact", m, inp, dict(h.knobs)):
                shown = generate.answer("generate/exact", m, inp, dict(h.knobs))
                assert isinstance(shown, GenerateAnswer)
    shows = {
        h.name
        for h in of_stage(generate.CATALOGUE, "generate/exact")
        for case in cases.values()
        if generate.applies("generate/exact", m, case, dict(h.knobs))
        and generate.answer("generate/exact", m, case, dict(h.knobs))
        != generate.answer("generate/exact", m, case, {})
    }
    # the UTF-8 hypotheses need a character split across tokens before a stop string
    assert shows == {h.name for h in generate.CATALOGUE} - {"pieces_as_text", "no_holdback"}
