"""The reference adapters' sessions (``impl.sessions``: transformers' ``DynamicCache``,
llama.cpp's context) against the state stages: each passes tiny-qwen2-f32's cases of
every state stage in its class (transformers ``exact``, llama.cpp ``quantized``), played
and judged exactly as the gates do (``specgate.checks.state``); a truncate planted in
either that answers but keeps the KV fails the conversations that drop KV (two template
drifts, a seam) and nothing else there. The fast tier plays the conversations (appends
after cached tokens, truncates) on llama.cpp; transformers' and every stage's cases are
the slow tier's (``ADAPTERS``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from specgate.checks import state
from specgate.upkeep import snapshots

MODEL = "tiny-qwen2-f32"
STAGES = {
    "state_incremental": (state.play_incremental, state.judge_incremental),
    "state_conversation": (state.play_conversation, state.judge_conversation),
    "state_reuse": (state.play_reuse, state.judge_reuse),
    "state_generate": (state.play_generate, state.judge_generate),
}
#: The conversations whose turns drop KV (the ``no_truncate`` mutant's, ``test_state_mutants``).
DROPPING_KV = {"03_system_prompt_changes", "04_system_prompt_added_later", "20_assistant_leading_newlines"}


@pytest.fixture(scope="module")
def model(tiny_model: Any) -> Any:
    return tiny_model


@pytest.fixture(scope="module")
def hf() -> Iterator[Any]:
    pytest.importorskip("transformers")
    from impl.hf.engine import HFEngine

    engine = HFEngine()
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def llamacpp() -> Iterator[Any]:
    pytest.importorskip("llama_cpp")
    from impl.llamacpp.engine import LlamaCppEngine

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPECGATE_LLAMA_THREADS", "1")  # two threads spinning on two busy cores: slower
        engine = LlamaCppEngine()
        yield engine
        engine.close()


def failures(engine: Any, model: Any, conformance_class: str, stages: list[str]) -> dict[str, dict[str, str]]:
    """stage -> {case id: failure} of ``stages`` played on ``engine`` as the gates play them."""
    out: dict[str, dict[str, str]] = {}
    for stage in stages:
        play, judge = STAGES[stage]
        out[stage] = {}
        for case_id, case in snapshots.load(model, stage).items():
            if why := judge(conformance_class, model.id, case, play(engine, model, case)):
                out[stage][case_id] = why
    return out


def keeping_kv(engine: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Plant in ``engine`` a truncate that answers but keeps the KV past ``n``."""
    opened = engine._session_cache

    def session_cache(model: Any) -> Any:
        cache = opened(model)
        cache.truncate = lambda n: None
        return cache

    monkeypatch.setattr(engine, "_session_cache", session_cache)


KV_STAGES = ["state_incremental", "state_conversation", "state_reuse"]
CLASS = {"hf": "exact", "llamacpp": "quantized"}
#: Both adapters; transformers' in the slow tier: loading torch, transformers and the weights
#: takes 15-50 s on two busy cores (the conversations then ~3 s), llama.cpp's whole file ~9 s.
ADAPTERS = [pytest.param("hf", marks=pytest.mark.slow), "llamacpp"]


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_sessions_pass_the_conversations_in_their_class(adapter, model, request) -> None:
    """The fast tier's sample: every conversation (appends after cached tokens, truncates at
    template drifts and a seam), in the adapter's class."""
    engine = request.getfixturevalue(adapter)
    assert "session" in engine.capabilities and CLASS[adapter] in engine.classes
    assert failures(engine, model, CLASS[adapter], ["state_conversation"]) == {"state_conversation": {}}


@pytest.mark.live  # ~30-90 s on two busy cores: llama.cpp's decode of the 150k-row output
def test_llama_cpp_sessions_pass_every_state_case_in_the_quantized_class(llamacpp, model) -> None:
    assert llamacpp.classes == {"quantized"}
    got = failures(llamacpp, model, "quantized", [*KV_STAGES, "state_generate"])
    assert got == {stage: {} for stage in STAGES}


@pytest.mark.live  # ~45 s, and decoding needs transformers' tokenizer built from the GGUF (~12-30 s)
def test_transformers_sessions_pass_every_state_case_in_the_exact_class(hf, model) -> None:
    got = failures(hf, model, "exact", [*KV_STAGES, "state_generate"])
    assert got == {stage: {} for stage in STAGES}


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_a_truncate_keeping_the_kv_fails_the_conversations_that_drop_kv(adapter, model, monkeypatch, request):
    engine = request.getfixturevalue(adapter)
    keeping_kv(engine, monkeypatch)
    conformance_class = "exact" if adapter == "hf" else "quantized"
    got = failures(engine, model, conformance_class, ["state_conversation"])["state_conversation"]
    assert set(got) == DROPPING_KV, got
    assert got["03_system_prompt_changes"].startswith("turn 3: after dropping 37 KV tokens"), got


def test_opening_more_sessions_than_the_bound_is_an_error_naming_it(llamacpp, model, monkeypatch) -> None:
    monkeypatch.setattr(llamacpp, "max_sessions", 2)
    opened = [llamacpp.session_open(model) for _ in range(llamacpp.max_sessions)]
    try:
        with pytest.raises(ValueError, match="2 sessions are open, the most llamacpp keeps: close one"):
            llamacpp.session_open(model)
    finally:
        for session in opened:
            llamacpp.session_close(session)
    with pytest.raises(ValueError, match="no open session"):
        llamacpp.session_append(opened[0], [1])
