"""The forward catalogue's ground: with no knob the deviated forward is the oracle's and
meets the recorded transformers logits; every hypothesis shows on a tiny model's case
(one the gate cannot tell from a correct forward must not be in the catalogue); and a
group two diagnoses both explain names both."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from oracle.forward import Model
from oracle.gguf import open_gguf
from specgate.checks import logits as logits_check
from specgate.diagnose import diagnoser, forward
from specgate.diagnose.tokenizer import of_stage
from specgate.plugin import model_missing
from specgate.supply import models as model_cache
from specgate.supply.models import model_ref
from specgate.upkeep import snapshots

#: a model per family, and the Q4_0 one the dequantization hypothesis needs
MODELS = ("tiny-qwen2-f32", "tiny-qwen3-f32", "tiny-qwen2-tied-f32", "tiny-qwen2-q4_0")
SHORT = ("raw_en", "raw_zh")  # two short prompts of every tiny model's logits snapshot


def _model(model_id: str) -> object:
    if model_id not in model_cache.cached_tiny_models():
        model_missing(f"{model_id} (run: specgate models tiny)")
    return model_ref(model_id)


#: Two summation orders of the same float32 logits (|logit| ≲ 10, ulp ≈ 1e-6) differ by a few ulps.
SUMMATION_ORDER_NOISE = 5e-5


@pytest.mark.parametrize("model_id", MODELS)
def test_without_knobs_the_deviated_forward_is_the_oracle_and_meets_transformers(model_id: str) -> None:
    model = _model(model_id)
    plain = Model(open_gguf(model.gguf))
    deviated = forward.DeviatedModel(open_gguf(model.gguf), {})
    cases = snapshots.load(model, "logits")
    for name in SHORT:
        case = cases[name]
        at = case["positions"]
        got = deviated.logits_at(case["ids"], at)
        want = plain.prefill(case["ids"])[at]
        plain.reset()
        # the same float32 operations, the final product over fewer rows: BLAS may sum in another
        # order (and threads split it otherwise), a few ulps of logits near 10 (measured up to 1.05e-5)
        assert float(np.abs(got - want).max()) <= SUMMATION_ORDER_NOISE, name
        failure, _ = logits_check.check_exact(model_id, {**case, "positions": list(range(len(at)))}, got)
        assert failure is None, f"{name}: {failure}"


@pytest.mark.slow  # 10 hypotheses × 4 models × 2 prompts: ~20 s of CPU
def test_every_hypothesis_shows_on_some_tiny_model_in_the_exact_class() -> None:
    refs = [(forward.reference(_model(m)), snapshots.load(_model(m), "logits")) for m in MODELS]
    for h in of_stage(forward.CATALOGUE, "logits/exact"):
        knobs = dict(h.knobs)
        shows = []
        for m, cases in refs:
            for name in SHORT:
                inp = {"ids": cases[name]["ids"]}
                if forward.applies("logits/exact", m, inp, knobs):
                    truth = forward.answer("logits/exact", m, inp, {})
                    if not forward.same("logits/exact", truth, forward.answer("logits/exact", m, inp, knobs)):
                        shows.append((m.model_id, name))
        assert shows, f"{h.name}: no tiny model's logits tell it from the spec'd forward"


def test_the_knobs_apply_only_where_the_model_has_what_they_deviate() -> None:
    q2, q3, tied = (forward.reference(_model(m)) for m in MODELS[:3])
    inp = {"ids": [1, 2]}
    assert not forward.applies("logits/exact", q2, inp, {"qk_norm": False})  # no QK-norm in Qwen2
    assert forward.applies("logits/exact", q3, inp, {"qk_norm": False})
    assert not forward.applies("logits/exact", q3, inp, {"bias": False})  # no q/k/v bias in Qwen3
    assert forward.applies("logits/exact", q2, inp, {"bias": False})
    assert not forward.applies("logits/exact", tied, inp, {"output": "token_embd"})  # tied already
    assert not forward.applies("logits/exact", tied, inp, {"gqa": "modulo"})  # one kv head: no mapping
    assert not forward.applies("logits/exact", q2, inp, {"q4_0": "interleaved"})  # no Q4_0 tensor


def test_a_group_two_diagnoses_both_explain_names_both() -> None:
    """The greedy grouping (``diagnoser._groups``) gives the cases to one diagnosis; where another
    explains every one of them too, the group's cause says the cases cannot tell them apart."""
    a, b, c = of_stage(forward.CATALOGUE, "logits/exact")[:3]
    records = [SimpleNamespace(nodeid=f"case{i}") for i in range(3)]
    cases = [diagnoser._Case(r, {}, None) for r in records]
    alone = {a: {"case0", "case1", "case2"}, b: {"case0", "case1", "case2"}, c: {"case0"}}
    (group,) = diagnoser._groups("logits/exact", "m", [a, b], alone, {}, 3, 3, cases)
    assert group.hypotheses == (a,) and group.alternatives == (b,)
    assert a.cause in group.cause and b.cause in group.cause and "cannot tell them apart" in group.cause
    groups = diagnoser._groups("logits/exact", "m", [a, c], alone, {}, 3, 3, cases)
    assert [(g.hypotheses, g.alternatives) for g in groups] == [((a,), ())]  # c explains less: no tie
