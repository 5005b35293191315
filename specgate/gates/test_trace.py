"""Trace gate: where in the forward pass the engine parts from the reference. The
engine's named intermediates (``trace`` op: llama.cpp's graph tensor names) of a short
prompt are walked by bisection — ``l_out`` at a few layers, then the layers between,
then the first departing layer's points in order — and the verdict names the first
point over its tolerance, where (positions, heads, dims) and by how much, and what
matched before it. Judged per conformance class: ``exact`` against transformers'
intermediates, ``quantized`` against llama.cpp's (its graph evaluation callback). The
walk and the tolerances are ``specgate.checks.trace``."""

import pytest

from impl.protocol import EngineError
from specgate.checks import trace as checks
from specgate.outcomes.gate import call, claims, fail_if

pytestmark = pytest.mark.gate("trace")


def test_trace(engine, specgate, model, model_id, case_id, case, conformance_class, request):
    claims(engine, "trace", conformance_class)
    ids = case["ids"]

    def fetch(points, positions):
        key = ("trace", model.id, tuple(ids), tuple(points), None if positions is None else tuple(positions))
        return specgate.answers.get(key, lambda: call(engine, "trace", model, ids, points, positions))

    if not engine.offers("trace"):
        call(engine, "trace", model, ids, ["inp_embd"])  # n/a, by the one rule
    verdict = checks.walk(
        fetch,
        checks.reference_arrays(case, conformance_class),
        case["n_layer"],
        case["head_dim"],
        conformance_class,
        engine.trace_points,
        case["output_positions"],
        case["output_columns"],
    )
    request.node.user_properties.append(("metric:trace_requests", verdict.requests))
    if verdict.malformed():  # NaN, Infinity or a wrong shape: error, not fail (PROTOCOL.md section 8)
        raise EngineError(verdict.malformed())
    label = f"[trace/{conformance_class}] {model_id}, prompt {case_id} ({len(ids)} tokens), vs {checks.CLASSES[conformance_class]}"
    fail_if(None if verdict.diverged is None else verdict.message(), label)
