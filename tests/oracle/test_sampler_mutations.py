"""Mutation evidence for the sample gate and the decode-loop known answers: each
planted defect makes the very gate test function ``nox -s parity`` runs fail, with
a message naming the model and the case."""

from __future__ import annotations

import types
from typing import Any

import pytest

import impl.oracle
from impl.oracle import OracleEngine
from oracle import decode_loop, sampler
from specgate.gates import test_generate as generate_gate
from specgate.gates import test_sample as gate
from specgate.plugin import SpecgateSession
from specgate.supply.models import model_ref
from tests.engines.mutants.sampler_top_p_ge import top_p_ge
from tests.oracle import test_decode_loop as stops

MODEL = "qwen2.5-coder-0.5b-instruct"


def penalty_window_63(logits, p):
    return sampler.penalties(logits, {**p, "window": list(p["window"])[-63:]})


SAMPLER_MUTATIONS = {
    "top-p with >= instead of >": (
        "top_p",
        top_p_ge,  # the sample mutant engine's defect
        "crafted-quarters/top-p-exact-0.75",
        "after step 2 \\(top_p\\): candidate set differs",
    ),
    "penalty window of 63": (
        "penalties",
        penalty_window_63,
        "code/window-edge-64",
        "after step 0 \\(penalties\\): probability of token",
    ),
}


@pytest.mark.parametrize("mutation", sorted(SAMPLER_MUTATIONS))
def test_sample_gate_catches(specgate, monkeypatch, mutation):
    step, broken, case_id, symptom = SAMPLER_MUTATIONS[mutation]
    model = model_ref(MODEL)
    specgate.snapshot_cases(model, "sample")
    engine = OracleEngine()
    gate.test_sample(
        engine, MODEL, case_id, specgate.snapshot_cases(model, "sample")[case_id]
    )  # the real oracle passes
    monkeypatch.setitem(sampler.STEPS, step, broken)
    with pytest.raises(pytest.fail.Exception, match=rf"\[sample\] model {MODEL}, case {case_id}.*{symptom}"):
        gate.test_sample(engine, MODEL, case_id, specgate.snapshot_cases(model, "sample")[case_id])


class PerTokenStops:
    """Stop strings searched in the newest token's bytes only (not the stream)."""

    def __init__(self) -> None:
        self.seen = 0

    def __call__(self, stream: bytes, stops_: list[bytes]) -> int | None:
        start, self.seen = self.seen, len(stream)
        hits = [i for s in stops_ if s and (i := stream.find(s, start)) >= 0]
        return min(hits) if hits else None


DECODE_MUTATIONS = {
    "stop strings matched per token": ("find_stop", PerTokenStops, "stop-string-split-across-tokens"),
    "split UTF-8 character emitted": ("complete_utf8_prefix_len", lambda: len, "multibyte-split-before-stop"),
}


@pytest.mark.parametrize("mutation", sorted(DECODE_MUTATIONS))
def test_stop_cases_catch(monkeypatch, mutation):
    attr, make, case = DECODE_MUTATIONS[mutation]
    stops.test_stop_cases(case)  # the real decode loop passes
    monkeypatch.setattr(decode_loop, attr, make())
    with pytest.raises(AssertionError, match=rf"\[decode loop\] case {case}"):
        stops.test_stop_cases(case)


GENERATE_MUTATIONS = {
    "stop strings matched per token": (
        "find_stop",
        PerTokenStops,
        "tiny-qwen2-f32",
        "stop-straddle/code",
        "expected .* engine gave",
    ),
    "split UTF-8 character emitted": (
        "complete_utf8_prefix_len",
        lambda: len,
        MODEL,
        "stop-after-split-character/rare-characters",
        "ends inside a UTF-8 character",
    ),
}


class ForwardOncePerHistory:
    """The oracle's real forward, computed once per token history and answered from that
    record afterwards. A decode-loop defect changes how the stream is cut, not which
    tokens the forward sees, so the unmutated and the mutated run share one forward
    (on the 0.5B model that halves a ~40 s test)."""

    def __init__(self, forward: Any) -> None:
        self.forward = forward
        self.logits: dict[tuple[int, ...], Any] = {}
        self.history: tuple[int, ...] = ()
        self.computed: tuple[int, ...] = ()  # the history the real forward's KV cache holds

    def reset(self) -> None:
        self.history = ()

    def prefill(self, ids: list[int]) -> Any:
        before, self.history = self.history, self.history + tuple(ids)
        if self.history not in self.logits:
            if self.computed != before:  # the cache holds another history: recompute this one
                self.forward.reset()
                ids = list(self.history)
            self.logits[self.history] = self.forward.prefill(ids)[-len(self.history) + len(before) :]
            self.computed = self.history
        return self.logits[self.history]

    def step(self, token: int) -> Any:
        return self.prefill([token])[0]


@pytest.mark.parametrize("mutation", sorted(GENERATE_MUTATIONS))
def test_generate_gate_catches(specgate, monkeypatch, mutation):
    attr, make, model_id, case_id, symptom = GENERATE_MUTATIONS[mutation]
    model = model_ref(model_id)
    specgate.snapshot_cases(model, "generate")
    engine = OracleEngine()
    once = ForwardOncePerHistory(impl.oracle._forward_model(model.gguf))
    monkeypatch.setattr(impl.oracle, "_forward_model", lambda _path: once.reset() or once)

    def run_gate() -> None:  # the gate function, with a fresh session (no cached answer) and a stand-in node
        node = types.SimpleNamespace(node=types.SimpleNamespace(user_properties=[]))
        session = SpecgateSession(impl="oracle")
        generate_gate.test_generate(
            engine,
            session,
            model,
            model_id,
            case_id,
            specgate.snapshot_cases(model, "generate")[case_id],
            "exact",
            node,
        )

    run_gate()  # the real oracle passes
    monkeypatch.setattr(decode_loop, attr, make())
    with pytest.raises(
        pytest.fail.Exception, match=rf"\[generate/exact\] model {model_id}, case {case_id}.*{symptom}"
    ):
        run_gate()
