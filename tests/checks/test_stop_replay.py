"""Stop cases always check something: where an engine's stream parts from the
reference at a near tie, the generate gate judges the engine's stop logic on its
own tokens (``specgate.checks.generate.replay_stop_logic``) instead of returning.

The engine below is an in-process adapter answering one crafted stream that parts
from the recorded one at step 0 — a near tie of the snapshot (margin 0.046 on
tiny-qwen2-f32) — and runs into the case's stop string straddling two tokens.
"""

from __future__ import annotations

import types

import pytest

from impl.oracle import OracleEngine
from impl.protocol import Engine
from specgate.gates import test_generate as gate
from specgate.plugin import SpecgateSession, model_missing
from specgate.supply import models as model_cache
from specgate.supply.models import model_ref

MODEL, CASE = "tiny-qwen2-f32", "stop-straddle/code"


class Answering(Engine):
    """An engine whose generate answers one fixed result."""

    name = "answering"
    classes = frozenset({"exact", "quantized"})

    def __init__(self, result: dict) -> None:
        self.result = result

    def generate(self, model, ids, params):
        return self.result


@pytest.fixture(scope="module")
def stream(specgate):
    try:
        model = model_ref(MODEL)
    except model_cache.ModelError as exc:  # the tiny model comes from `specgate models tiny`
        model_missing(str(exc))
    case = specgate.snapshot_cases(model, "generate")[CASE]
    assert case["params"]["stop"] == ["an[s"] and case["params"]["max_tokens"] == 4
    oracle = OracleEngine()
    tokens = oracle.encode(model, "x an", False) + oracle.encode(model, "[s", False)
    assert len(tokens) <= 4 and tokens[0] != case["reference"]["ids"][0]
    assert case["reference"]["margins"][0] < 1.0  # a near tie for the quantized class
    more = oracle.encode(model, "y", False)
    return model, case, tokens, more


def run_gate(engine, model, case, conformance_class="quantized"):
    node = types.SimpleNamespace(node=types.SimpleNamespace(user_properties=[]))
    gate.test_generate(engine, SpecgateSession(impl="t"), model, MODEL, CASE, case, conformance_class, node)
    return node.node.user_properties


def test_a_near_tie_stream_with_right_stop_logic_passes(stream):
    model, case, tokens, _ = stream
    right = {"ids": tokens, "bytes": b"x ".hex(), "finish_reason": "stop_string", "chunks": [b"x ".hex()]}
    properties = run_gate(Answering(right), model, case)
    assert any("stop logic replayed" in str(p) for p in properties)


def test_a_near_tie_stream_with_a_per_token_stop_search_fails(stream):
    model, case, tokens, more = stream
    # A stop search that looks only at each token's own bytes never sees "an[s": it runs on.
    ids = (tokens + more * 4)[:4]
    data = b"".join(OracleEngine().decode(model, [i]) for i in ids)
    wrong = {"ids": ids, "bytes": data.hex(), "finish_reason": "length"}
    with pytest.raises(
        pytest.fail.Exception, match=r"on the engine's own tokens .* the decode loop gives b'x '"
    ):
        run_gate(Answering(wrong), model, case)


def test_a_near_tie_stream_stopping_without_a_stop_string_fails(stream):
    model, case, tokens, _ = stream
    early = {"ids": tokens[:1], "bytes": b"x".hex(), "finish_reason": "stop_string"}
    with pytest.raises(pytest.fail.Exception, match="would go on"):
        run_gate(Answering(early), model, case)


def test_the_exact_class_holds_the_same_stream_to_its_tighter_tie_tolerance(stream):
    model, case, tokens, _ = stream
    right = {"ids": tokens, "bytes": b"x ".hex(), "finish_reason": "stop_string"}
    with pytest.raises(pytest.fail.Exception, match=r"exceeds the exact tie tolerance 0\.01"):
        run_gate(Answering(right), model, case, "exact")
