"""The state snapshots are what their build gives today: each case's ids are the corpus
prompt or the conversation's renders tokenized by the model's own tokenizer and
template, the turns' instructions (``keep``, ``drop``, the drift or stale KV named) are
the oracle's incremental renderer's, and the recorded reference of a tiny model is still
the oracle's one-shot prefill by the exact class's check (the libraries' own references
beside it: ``test_state_references.py``). A corpus, tokenizer, template
or oracle change that moves them fails here, naming the case (re-record with
``python -m specgate.stages.state_cases MODEL``)."""

from __future__ import annotations

import numpy as np
import pytest

from specgate.checks import state
from specgate.plugin import model_missing
from specgate.stages import state_cases
from specgate.supply import models as model_cache
from specgate.upkeep import corpus, drift_table, snapshots
from specgate.upkeep.model_ids import model_for


def cached(model_id: str) -> None:
    have = model_cache.cached_tiny_models() if corpus.is_tiny(model_id) else model_cache.cached_models()
    if model_id not in have:
        model_missing(f"{model_id} (run: specgate models fetch / specgate models tiny)")


def test_a_reuse_branch_shares_a_prefix_and_then_differs_in_both_sessions() -> None:
    renders = {"x/1": [1, 2, 3, 4, 5], "y/1": [1, 2, 9, 9], "y/2": [1, 2, 9, 9, 7], "z/1": [8, 8, 8]}
    pairs = state_cases.branch_pairs(renders)
    assert pairs == {"branch": ([1, 2, 3, 4, 5], [1, 2, 9, 9], 2)}  # y/2 extends y/1: no drift there
    renders["y/2"] = [1, 7, 7]  # the template re-rendered y's history: a drift at token 1
    assert state_cases.branch_pairs(renders)["drift"] == ([1, 2, 9, 9], [1, 7, 7], 1)
    cases = state_cases.reuse_cases({"x/1": [1, 2, 3, 4, 5], "y/1": [1, 2, 9, 9]}, lambda ids: np.arange(4.0))
    assert sorted(cases) == [f"branch_{s}" for s in sorted(state_cases.SCENARIOS)]
    side = cases["branch_side_by_side"]
    assert [(p["session"], p["n"]) for p in side["points"]] == [("b", 4), ("a", 5)]
    assert cases["branch_cut_back"]["sessions"]["b"] == [1, 2]
    interleaved = cases["branch_interleaved"]
    assert {k: len(v) for k, v in interleaved["sessions"].items()} == {"a": 4, "b": 4}
    spans = [tuple(s["span"]) for s in interleaved["steps"] if s["op"] == "append"]
    assert spans == [(0, 2), (0, 2), (2, 4), (2, 4)]


def test_chunkings_cover_the_prompt_each_in_its_own_way() -> None:
    for n in (1, 2, 10, 26):
        ways = state_cases.chunkings(n)
        assert all(sum(sizes) == n and min(sizes) >= 1 for sizes in ways.values())
        assert ways["one_by_one"] == [1] * n and ways["whole"] == [n]
    assert state_cases.chunkings(10)["uneven"] == [2, 5, 1, 2]


@pytest.mark.parametrize("model_id", state_cases.MODELS)
def test_the_cases_ids_and_turns_are_the_corpus_through_the_model_s_tokenizer_and_template(
    model_id: str,
) -> None:
    cached(model_id)
    model = model_for(model_id)
    template, tokenize = drift_table.oracle_side(model_id)
    incremental = snapshots.load(model, "state_incremental")
    for prompt_id in state_cases.PROMPTS:
        ids = tokenize(str(corpus.prompts()[prompt_id]["text"]))
        for way, sizes in state_cases.chunkings(len(ids)).items():
            case = incremental[f"{prompt_id}_{way}"]
            assert (case["ids"], case["chunks"]) == (ids, sizes), f"{model_id}/{prompt_id}_{way}"
    conversations = snapshots.load(model, "state_conversation")
    kind = "tiny" if corpus.is_tiny(model_id) else "real"
    assert sorted(conversations) == sorted(state_cases.CONVERSATIONS[kind])
    for conversation_id, case in conversations.items():
        played = drift_table.play(template, tokenize, corpus.multi_turn_conversations()[conversation_id])
        built = state_cases.conversation_turns(played)
        stored = [{k: v for k, v in t.items() if k not in ("reference", "references")} for t in case["turns"]]
        assert stored == built, f"{model_id}/{conversation_id}"
    renders = {
        f"{c}/{k}": list(t["ids"]) for c in state_cases.CONVERSATIONS[kind] for k, t in
        enumerate(conversations[c]["turns"], 1)
    }  # fmt: skip
    reuse = snapshots.load(model, "state_reuse")
    built = state_cases.reuse_cases(renders, lambda ids: np.zeros(1, np.float32))
    assert {k: {f: v for f, v in c.items() if f != "points"} for k, c in reuse.items()} == {
        k: {f: v for f, v in c.items() if f != "points"} for k, c in built.items()
    }, model_id
    for case_id, case in reuse.items():
        assert [{"session": p["session"], "n": p["n"]} for p in case["points"]] == [
            {"session": p["session"], "n": p["n"]} for p in built[case_id]["points"]
        ], f"{model_id}/{case_id}"
    batched = {**{p: tokenize(str(corpus.prompts()[p]["text"])) for p in state_cases.PROMPTS},
               **{f"{c}/1": renders[f"{c}/1"] for c in state_cases.CONVERSATIONS[kind][: state_cases.GENERATE_PROMPTS]}}  # fmt: skip
    stored_batches = snapshots.load(model, "state_batch")
    built_batches = state_cases.batch_cases(batched, lambda ids: np.zeros(1, np.float32))
    assert {k: (c["labels"], c["prompts"]) for k, c in stored_batches.items()} == {
        k: (c["labels"], c["prompts"]) for k, c in built_batches.items()
    }, model_id
    # state_chat: the same conversations as messages, ids and references; a seam's ids alone
    chat = snapshots.load(model, "state_chat")
    built = state_cases.chat_cases(
        {c: corpus.multi_turn_conversations()[c] for c in state_cases.CONVERSATIONS[kind]},
        lambda c: drift_table.play(template, tokenize, dict(c)), tokenize, lambda ids: np.zeros(4, np.float32),
    )  # fmt: skip

    def without_references(cases: dict) -> dict:
        return {
            k: [{f: v for f, v in t.items() if f != "reference"} for t in c["turns"]]
            for k, c in cases.items()
        }

    assert without_references(chat) == without_references(built), model_id
    for conversation_id, case in chat.items():
        assert [t["reference"] for t in case["turns"]] == [
            t["reference"] for t in conversations[conversation_id]["turns"]
        ], f"{model_id}/{conversation_id}"
    # every conversation played drops stale KV somewhere but the plain one
    drops = {c: any(t["drop"] for t in case["turns"]) for c, case in conversations.items()}
    assert drops == {c: c != "01_plain_chat" for c in conversations}


@pytest.mark.parametrize("model_id", [m for m in state_cases.MODELS if corpus.is_tiny(m)])
def test_a_tiny_model_s_recorded_references_are_the_oracle_s_one_shot_prefill(model_id: str) -> None:
    cached(model_id)
    model = model_for(model_id)
    one_shot = state_cases.oracle_one_shot(model)
    for case_id, case in snapshots.load(model, "state_incremental").items():
        failure, _ = state.judge_row("exact", model_id, case["ids"], case["reference"], one_shot(case["ids"]))
        assert failure is None, f"{model_id}/{case_id}: {failure}"
    for case_id, case in snapshots.load(model, "state_conversation").items():
        for number, turn in enumerate(case["turns"], 1):
            row = one_shot(turn["ids"])
            failure, _ = state.judge_row("exact", model_id, turn["ids"], turn["reference"], row)
            assert failure is None, f"{model_id}/{case_id} turn {number}: {failure}"
            shifted = np.roll(row, 1)  # the check is not blind: another row fails it
            assert state.judge_row("exact", model_id, turn["ids"], turn["reference"], shifted)[0] is not None
    for case_id, case in snapshots.load(model, "state_reuse").items():
        for ids, reference in state.judged_points(case):
            failure, _ = state.judge_row("exact", model_id, ids, reference, one_shot(ids))
            assert failure is None, f"{model_id}/{case_id} at {len(ids)} tokens: {failure}"
    for case_id, case in snapshots.load(model, "state_batch").items():
        for ids, reference in state.judged_points(case):
            failure, _ = state.judge_row("exact", model_id, ids, reference, one_shot(ids))
            assert failure is None, f"{model_id}/{case_id} at {len(ids)} tokens: {failure}"
