"""The oracle engine does less without answering differently: a trace walk's requests for
one prompt share one forward pass, and a generation that repeats an earlier one's prompt
and tokens reads the logits it kept — while every answer equals what a fresh engine (no
kept state) computes."""

from __future__ import annotations

import numpy as np
import pytest

import impl.oracle
from impl.oracle import OracleEngine, release_forward
from oracle.forward import Model
from oracle.trace import Recorder, all_points
from specgate.plugin import model_missing
from specgate.supply import models
from specgate.supply.models import model_ref

MODEL_ID = "tiny-qwen3-f32"
PROMPT = [int(x) for x in np.random.default_rng(5).integers(0, 151_643, 12)]


@pytest.fixture
def forward_calls(monkeypatch):
    """Counts the real forward's prefills and steps (the model still computes them)."""
    if MODEL_ID not in models.cached_tiny_models():
        model_missing(f"{MODEL_ID} (run: specgate models tiny)")
    calls = {"prefill": 0, "step": 0}
    prefill = Model.prefill

    def counted(self, ids, *args, **kwargs):
        calls["prefill"] += 1
        return prefill(self, ids, *args, **kwargs)

    def step(self, token):
        calls["step"] += 1
        return prefill(self, [token])[0]

    monkeypatch.setattr(Model, "prefill", counted)
    monkeypatch.setattr(Model, "step", step)
    release_forward()
    yield calls
    release_forward()


def test_a_trace_walk_runs_one_forward_pass_per_prompt(forward_calls):
    model, engine = model_ref(MODEL_ID), OracleEngine()
    first = engine.trace(model, PROMPT, ["inp_embd", "l_out-1", "result_norm"])
    then = engine.trace(model, PROMPT, ["result_output", "Kcur-2", "ffn_out-0"], positions=[0, 11])
    assert forward_calls["prefill"] == 1
    fresh = Model.from_gguf(model.gguf)
    recorder = Recorder(all_points(fresh.hparams.n_layer))
    fresh.prefill(PROMPT, trace=recorder)
    for point, value in first.items():
        np.testing.assert_array_equal(value, recorder.values[point], err_msg=point)
    for point, value in then.items():
        np.testing.assert_array_equal(value, recorder.values[point][[0, 11]], err_msg=point)
    before = forward_calls["prefill"]
    engine.trace(model, PROMPT[:5], ["inp_embd"])  # another prompt: its own pass
    assert forward_calls["prefill"] == before + 1


def test_a_generation_repeating_an_earlier_one_reads_its_logits(forward_calls):
    model, engine = model_ref(MODEL_ID), OracleEngine()
    greedy = {"max_tokens": 10, "temperature": 0.0, "repeat_penalty": 1.0}
    sampled = {"max_tokens": 10, "temperature": 1.5, "seed": 3, "top_k": 0, "top_p": 1.0}
    full = engine.generate(model, PROMPT, greedy)
    computed = dict(forward_calls)
    shorter = engine.generate(model, PROMPT, {**greedy, "max_tokens": 4})
    assert forward_calls == computed  # read, not computed
    parted = engine.generate(model, PROMPT, sampled)  # parts from the kept stream: computed
    assert forward_calls["step"] > computed["step"]
    assert parted["ids"] != full["ids"]
    for params, answer in (({**greedy, "max_tokens": 4}, shorter), (sampled, parted)):
        release_forward()  # nothing kept: a fresh engine's answer
        assert not impl.oracle._decoded
        assert OracleEngine().generate(model, PROMPT, params) == answer
