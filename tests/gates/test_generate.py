"""Generate gate: greedy continuations judged per conformance class — ``exact``
against transformers' stream, ``quantized`` against llama.cpp's, each with its
class's near-tie tolerance (``specgate.checks.generate.CLASS_TIE_TOLERANCE``) — and
stop-string cases with known answers (a stop string split across tokens; a
character split across tokens before a stop), including the streamed chunks when
the engine reports them. Where the engine's stream parts from the reference at a
near tie, its stop logic is judged on its own tokens: a stop case always checks
something."""

from __future__ import annotations

import functools

import pytest

from specgate.checks import generate as checks
from specgate.gate import call, fail_if, first_difference, reference_disagreement
from specgate.plugin import CONFORMANCE_CLASSES, claims, gate_params, snapshot_cases

pytestmark = pytest.mark.gate("generate")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if {"model_id", "case_id"} <= set(metafunc.fixturenames):
        metafunc.parametrize(("model_id", "case_id"), gate_params(metafunc.config, "generate"))
        metafunc.parametrize("conformance_class", CONFORMANCE_CLASSES)


@functools.cache
def oracle_pieces(model):
    """(piece, stop tokens) of the model's vocabulary, read by the oracle (for the
    stop-logic replay only: the engine's stream is never compared with the oracle's)."""
    from impl.oracle import OracleEngine
    from oracle.dispatch import dispatch
    from oracle.gguf import open_gguf

    oracle = OracleEngine()
    special = dispatch(open_gguf(model.gguf)).special
    return (lambda token: oracle.decode(model, [token])), (special.eos, special.im_end)


def test_generate(engine, specgate, model, model_id, case_id, conformance_class, request):
    case = snapshot_cases(model, "generate")[case_id]
    if "disagreement" in case:
        reference_disagreement(case["disagreement"])
    if engine.offers("generate"):
        claims(engine, conformance_class)
    got = specgate.answers.get(
        ("generate", model.id, tuple(case["prompt"]), repr(sorted(case["params"].items()))),
        lambda: checks.well_formed(call(engine, "generate", model, case["prompt"], case["params"])),
    )
    tolerance = checks.CLASS_TIE_TOLERANCE[conformance_class]
    label = f"[generate/{conformance_class}] model {model_id}, case {case_id}"
    text = f"\n  engine text: {bytes.fromhex(got['bytes'])!r}"

    if "references" in case:  # a greedy stream
        name = checks.CLASS_REFERENCE[conformance_class]
        failure, near_tie = checks.compare_greedy(case["references"][name], got, tolerance)
        fail_if(failure and f"engine departs from {name}'s greedy stream: {failure}{text}", label)
        if near_tie:
            request.node.user_properties.append(("metric:near_tie", f"{name}: {near_tie}"))
        return

    ref = case["reference"]  # a stop-string case: the stream must first follow the reference
    label += f", stop {case['params']['stop']!r}"
    diverge = first_difference(ref["ids"][: len(got["ids"])], got["ids"][: len(ref["ids"])])
    if diverge is None:
        problem = checks.compare_stop_case(case, got)
        fail_if(problem and problem + text, label)
        return
    if ref["margins"][diverge] > tolerance:
        fail_if(
            f"the stream departs from the reference at step {diverge}, where the reference's top-2 margin "
            f"{ref['margins'][diverge]:.4f} exceeds the {conformance_class} tie tolerance {tolerance}{text}",
            label,
        )
    request.node.user_properties.append(
        (
            "metric:near_tie",
            f"stream parts from the reference at near-tie step {diverge}; stop logic replayed",
        )
    )
    piece, stop_tokens = oracle_pieces(model)
    problem = checks.replay_stop_logic(case, got, piece, stop_tokens)
    fail_if(problem and problem + text, label)
