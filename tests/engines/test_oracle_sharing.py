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


def _play(engine: OracleEngine, model, steps) -> list:
    """A session played through ``steps`` (("append", ids) or ("truncate", n)): each answer."""
    sid, answers = engine.session_open(model), []
    for op, arg in steps:
        if op == "append":
            answer = engine.session_append(sid, arg)
            answers.append((answer["n_past"], answer["logits"]))
        else:
            answers.append(engine.session_truncate(sid, arg))
    engine.session_close(sid)
    return answers


def _same(got: list, fresh: list) -> None:
    assert len(got) == len(fresh)
    for a, b in zip(got, fresh, strict=True):
        if isinstance(a, tuple):
            assert a[0] == b[0]
            np.testing.assert_array_equal(a[1], b[1])  # bit for bit
        else:
            assert a == b


def test_a_session_repeating_anothers_appends_reads_their_work(forward_calls):
    """A second session over the same appends (a warm generation, the same prefix in
    another case) reads the first's keys, values and logits; a chunk cut differently, or
    appended after a truncate that kept other rows, is computed; every answer equals a
    fresh engine's bit for bit."""
    model, engine = model_ref(MODEL_ID), OracleEngine()
    cut = [("append", PROMPT[:5]), ("append", PROMPT[5:9]), ("truncate", 7), ("append", PROMPT[7:12])]
    first = _play(engine, model, cut)
    computed = forward_calls["prefill"]
    assert computed == 3
    again = _play(engine, model, cut)
    assert forward_calls["prefill"] == computed  # read, not computed
    _same(again, first)
    whole = _play(engine, model, [("append", PROMPT)])  # another cut of the same tokens: computed
    assert forward_calls["prefill"] == computed + 1
    kept_other = [("append", PROMPT[:5]), ("append", PROMPT[5:8]), ("truncate", 7), ("append", PROMPT[7:12])]
    other = _play(engine, model, kept_other)  # the first append is read; the rest were made otherwise
    assert forward_calls["prefill"] == computed + 3
    truncated = _play(engine, model, [("append", PROMPT[:8]), ("truncate", 4), ("append", PROMPT[8:12])])
    untruncated = [("append", PROMPT[:8]), ("append", PROMPT[8:12])]
    held_all = _play(engine, model, untruncated)  # the same chunks, all 8 rows held: the second computed
    assert forward_calls["prefill"] == computed + 6  # the 8 tokens, the 4 after them twice
    assert held_all[1][0] == 12 and truncated[2][0] == 8
    for steps, answers in ((cut, first), (cut, again), ([("append", PROMPT)], whole), (kept_other, other),
                           (untruncated, held_all)):  # fmt: skip
        release_forward()  # nothing kept: a fresh engine's answer
        assert not impl.oracle._chunks
        _same(answers, _play(OracleEngine(), model, steps))


def test_the_kept_chunks_are_bounded(forward_calls, monkeypatch):
    model, engine = model_ref(MODEL_ID), OracleEngine()
    monkeypatch.setattr(
        impl.oracle, "CHUNK_BYTES", 3 * 1024 * 1024
    )  # a few rows of a 151,936-token vocabulary
    _play(engine, model, [("append", [t]) for t in PROMPT])
    kept = sum(impl.oracle._chunk_bytes(e) for e in impl.oracle._chunks.values())
    assert 0 < kept <= impl.oracle.CHUNK_BYTES and len(impl.oracle._chunks) < len(PROMPT)
