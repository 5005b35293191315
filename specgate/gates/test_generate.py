"""Generate gate: greedy continuations judged per conformance class — ``exact``
against transformers' stream, ``quantized`` against llama.cpp's, each with its
class's near-tie tolerance (``specgate.checks.generate.CLASS_TIE_TOLERANCE``) — and
stop-string cases with known answers (a stop string split across tokens; a
character split across tokens before a stop), including the streamed chunks when
the engine reports them. Where the engine's stream parts from the reference at a
near tie, its stop logic is judged on its own tokens: a stop case always checks
something. The judgement is ``specgate.checks.generate.check``."""

import pytest

from specgate.checks import generate as checks
from specgate.outcomes.gate import call, claims, fail_if

pytestmark = pytest.mark.gate("generate")


def test_generate(engine, specgate, model, model_id, case_id, case, conformance_class, request):
    claims(engine, "generate", conformance_class)
    got = specgate.answers.get(
        ("generate", model.id, tuple(case["prompt"]), repr(sorted(case["params"].items()))),
        lambda: checks.well_formed(call(engine, "generate", model, case["prompt"], case["params"])),
    )
    failure, near_tie = checks.check(case, got, conformance_class, model)
    if near_tie:
        request.node.user_properties.append(("metric:near_tie", near_tie))
    stop = f", stop {case['params']['stop']!r}" if "reference" in case else ""
    fail_if(failure, f"[generate/{conformance_class}] model {model_id}, case {case_id}{stop}")
