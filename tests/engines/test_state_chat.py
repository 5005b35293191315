"""The ``state_chat`` stage (an engine that renders and caches itself: ``conversation_*``)
against planted chat-engine bugs (``mutants/state_bugs.py``): the oracle served over
``cmd:`` passes every case; ``seam_delta`` (each turn's delta tokenized alone and appended)
fails exactly the conversations with a seam, ``drift_appended`` (the stale KV kept across a
template drift) exactly those with a drift, each message naming the cause. Played and judged
as the gate does (``specgate.checks.state``), on one tiny model's committed snapshot, in the
exact class."""

from __future__ import annotations

import shlex
import sys
from typing import Any

import numpy as np
import pytest

from impl.process.client import CmdEngine
from specgate.checks import state
from specgate.outcomes.gate import NotApplicable
from specgate.upkeep import snapshots
from tests.engines.fault_engine import ToyEngine
from tests.engines.test_state_mutants import MUTANTS

MODEL = "tiny-qwen2-f32"
SEAMS = {"20_assistant_leading_newlines"}
DRIFTS = {"03_system_prompt_changes", "04_system_prompt_added_later"}


@pytest.fixture(scope="module")
def model(tiny_model: Any) -> Any:
    return tiny_model


@pytest.fixture(scope="module")
def cases(model: Any) -> dict[str, Any]:
    return snapshots.load(model, "state_chat")


@pytest.fixture(scope="module")
def found(model: Any, cases: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Per engine (the oracle over ``cmd:``, each chat mutant), its failing cases."""
    out = {}
    for name, argv in [
        ("oracle", ("-m", "specgate.cli", "engine", "--impl", "oracle")),
        ("seam_delta", (str(MUTANTS), "seam_delta")),
        ("drift_appended", (str(MUTANTS), "drift_appended")),
    ]:
        engine = CmdEngine(shlex.join([sys.executable, *argv]))
        try:
            out[name] = {}
            for case_id, case in cases.items():
                if why := state.judge_chat("exact", model.id, case, state.play_chat(engine, model, case)):
                    out[name][case_id] = why
        finally:
            engine.close()
    return out


def test_the_snapshot_plays_the_conversation_stages_conversations(model: Any, cases: dict[str, Any]) -> None:
    """The same conversations, turns, ids and references as ``state_conversation``; a seam
    turn records the past's ids followed by the delta tokenized alone, which differ."""
    conversation = snapshots.load(model, "state_conversation")
    assert set(cases) == set(conversation) and set(cases) >= SEAMS | DRIFTS
    for case_id, case in cases.items():
        for chat, turn in zip(case["turns"], conversation[case_id]["turns"], strict=True):
            assert chat["ids"] == turn["ids"] and chat["reference"] == turn["reference"]
            assert chat["append"]  # every corpus turn sends messages
    seams = {c for c, case in cases.items() for t in case["turns"] if "seam" in t}
    drifts = {c for c, case in cases.items() for t in case["turns"] if "drift" in t}
    assert (seams, drifts) == (SEAMS, DRIFTS)
    seam = cases["20_assistant_leading_newlines"]["turns"][1]["seam"]
    assert seam["token"] == 34 and seam["alone"] != cases["20_assistant_leading_newlines"]["turns"][1]["ids"]


def test_the_oracle_over_cmd_passes_every_chat_case(found) -> None:
    assert found["oracle"] == {}


def test_a_delta_tokenized_alone_fails_the_seam_conversations_naming_the_seam(found) -> None:
    got = found["seam_delta"]
    assert set(got) == SEAMS
    message = got["20_assistant_leading_newlines"]
    assert message.startswith(
        "turn 2: the engine's cache holds the past render's tokens followed by the delta tokenized alone: a seam "
        "at token 34, [198, 198, 8420, 13] where the whole render tokenized gives [271, 8420, 13, 151645]"
    ), message
    assert "a fresh prefill of the whole render differs by KL" in message


def test_stale_kv_kept_across_a_drift_fails_the_drift_conversations_naming_the_drift(found) -> None:
    got = found["drift_appended"]
    assert set(got) == DRIFTS
    message = got["03_system_prompt_changes"]
    assert message.startswith(
        "turn 3: the engine kept 37 KV tokens of the past render that the new render replaces (offset 29: "
    ), message
    assert "You are a pirate." in message and "You are a butler." in message
    assert "a template drift" in message and "a fresh prefill of the whole render differs by KL" in message
    assert got["04_system_prompt_added_later"].startswith("turn 2: the engine kept ")


def test_other_wrong_ids_name_the_first_difference(cases: dict[str, Any]) -> None:
    turn = cases["01_plain_chat"]["turns"][1]
    wrong = [*turn["ids"][:5], 7, *turn["ids"][6:]]
    assert state.held_ids(turn, cases["01_plain_chat"]["turns"][0]["ids"], wrong) == (
        f"the engine's cache holds {len(wrong)} ids, the whole render tokenized {len(turn['ids'])}; they first "
        f"differ at index 5: engine {wrong[5:9]} vs render {turn['ids'][5:9]}"
    )


def test_an_engine_without_conversations_is_not_applicable(model: Any, cases: dict[str, Any]) -> None:
    class NoConversations(ToyEngine):
        capabilities = frozenset({"session"})

    with pytest.raises(NotApplicable, match="does not offer 'conversation'"):
        state.play_chat(NoConversations(), model, next(iter(cases.values())))


def test_the_toy_engine_answers_every_turn(model: Any, cases: dict[str, Any]) -> None:
    played = state.play_chat(ToyEngine(), model, cases["01_plain_chat"])
    assert len(played.ids) == len(played.rows) == 4 and np.isfinite(played.rows[0]).all()
