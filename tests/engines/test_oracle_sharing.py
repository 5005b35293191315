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


def _plain_session(model):
    """The oracle's session over a freshly loaded model: no engine, no memo."""
    from oracle.session import Session

    return Session(Model.from_gguf(model.gguf))


#: A session's operations: appends of several lengths, a truncate, an append past it.
PLAY = (("append", PROMPT[:5]), ("append", PROMPT[5:8]), ("append", PROMPT[8:9]),
        ("truncate", 6), ("append", PROMPT[6:10]))  # fmt: skip


def _play(do, session_ops=PLAY):
    return [do(op, arg) for op, arg in session_ops]


def test_a_session_append_repeating_an_earlier_one_reads_its_rows(forward_calls):
    model, engine = model_ref(MODEL_ID), OracleEngine()

    def on(sid):
        def do(op, arg):
            if op == "append":
                return engine.session_append(sid, arg)["logits"]
            return engine.session_truncate(sid, arg)

        return do

    first = _play(on(engine.session_open(model)))
    computed = dict(forward_calls)
    second_sid = engine.session_open(model)
    second = _play(on(second_sid))
    assert forward_calls == computed  # every append read, none computed
    plain = _plain_session(model)
    expected = _play(lambda op, arg: plain.append(arg)[1] if op == "append" else plain.truncate(arg))
    for got_first, got_second, want in zip(first, second, expected, strict=True):
        np.testing.assert_array_equal(got_first, want)
        np.testing.assert_array_equal(got_second, want)
    cache, plain_cache = engine._session(second_sid).model.cache, plain.model.cache
    assert cache.n_past == plain_cache.n_past == 10
    for layer in range(cache.n_layer):
        for got, want in zip(cache.rows(layer, 0, 10), plain_cache.rows(layer, 0, 10), strict=True):
            np.testing.assert_array_equal(got, want)


def test_an_append_is_known_by_what_the_cache_holds_not_by_the_ids(forward_calls):
    """A cache corrupted as a state bug would (a key overwritten) holds other contents under
    the same ids: its next append is computed on them, not read from the clean session's."""
    model, engine = model_ref(MODEL_ID), OracleEngine()
    clean, corrupt = engine.session_open(model), engine.session_open(model)
    for sid in (clean, corrupt):
        engine.session_append(sid, PROMPT[:6])
    engine._session(corrupt).model.cache.rows(0, 0, 6)[0][:, 2] += 1.0
    right = engine.session_append(clean, PROMPT[6:8])["logits"]
    computed = dict(forward_calls)
    wrong = engine.session_append(corrupt, PROMPT[6:8])["logits"]
    assert forward_calls["prefill"] == computed["prefill"] + 1
    assert not np.array_equal(wrong, right)
    plain = _plain_session(model)
    plain.append(PROMPT[:6])
    plain.model.cache.rows(0, 0, 6)[0][:, 2] += 1.0
    np.testing.assert_array_equal(wrong, plain.append(PROMPT[6:8])[1])


def test_the_append_memo_keeps_its_byte_budget(forward_calls):
    from impl.append_memo import AppendMemo

    model = model_ref(MODEL_ID)
    session = _plain_session(model)
    memo, forward = AppendMemo(budget=0), session.model
    forward.prefill(PROMPT[:3])
    memo.append(forward.cache, PROMPT[3:4], None, lambda: forward.prefill(PROMPT[3:4]))
    assert (memo.held, memo.misses, len(memo._entries)) == (0, 1, 0)  # larger than the budget: not kept
    memo.budget = 2**40
    memo.append(forward.cache, PROMPT[4:5], None, lambda: forward.prefill(PROMPT[4:5]))
    memo.budget = 3 * memo.held  # three one-token appends
    for n in range(5, 12):
        memo.append(forward.cache, PROMPT[n : n + 1], None, lambda n=n: forward.prefill(PROMPT[n : n + 1]))
        assert memo.held <= memo.budget
    assert len(memo._entries) == 3 and memo.misses == 9  # the three newest kept


def test_released_forward_weights_go_by_reference_count_alone(forward_calls):
    """The gates collect garbage after a model change only when large weights went
    (``specgate.gates.COLLECT_BYTES``): the oracle's ``Model`` — used by every kind of
    request first — must be freed the moment ``release_forward`` drops it, with no
    collection, and the bytes it reports are its weights'."""
    import gc
    import weakref

    model, engine = model_ref(MODEL_ID), OracleEngine()
    engine.logits(model, PROMPT, positions=[3, 11])
    engine.trace(model, PROMPT, ["l_out-1"])
    engine.generate(model, PROMPT, {"max_tokens": 3, "temperature": 0.0})
    sid = engine.session_open(model)
    engine.session_append(sid, PROMPT)
    engine.session_generate(sid, {"max_tokens": 2, "temperature": 0.0})
    cid = engine.conversation_open(model)
    engine.conversation_turn(cid, [{"role": "user", "content": "hi"}])
    (loaded,) = impl.oracle._forward_models.loaded_values()
    gone, weights = weakref.ref(loaded), loaded.weights.cached_bytes
    del loaded
    assert weights > 0
    gc.disable()
    try:
        assert release_forward() == weights
        assert gone() is None, "the released Model is kept alive by a reference cycle"
    finally:
        gc.enable()
    assert release_forward() == 0  # nothing loaded: nothing dropped
