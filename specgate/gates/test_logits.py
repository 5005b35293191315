"""Logits gate: the engine's logits at each prompt's recorded positions (asked as the
request's ``positions``), judged in the ``exact`` class (against transformers' float32
forward on the same dequantized weights) and the ``quantized`` class (against llama.cpp
on the same GGUF). The rules and tolerances are in ``specgate.checks.logits``; an
unclaimed class is n/a. The engine computes each prompt's logits once, whichever classes
read them."""

import pytest

from specgate.checks import logits as checks
from specgate.outcomes.gate import call, claims, fail_if, refused, report_metrics

pytestmark = pytest.mark.gate("logits")


def test_logits(engine, specgate, model, model_id, case_id, case, conformance_class, request):
    reference, metrics = checks.CLASSES[conformance_class]
    label = f"[logits/{conformance_class}] model {model_id}, prompt {case_id} ({len(case['ids'])} tokens), vs {reference}"
    claims(engine, "logits", conformance_class)
    got = specgate.answers.get(
        ("logits", model.id, tuple(case["ids"]), tuple(case["positions"])),
        lambda: checks.answer(call(engine, "logits", model, case["ids"], positions=case["positions"])),
    )
    fail_if(checks.well_formed(case, got), label)
    failure, cmp = checks.check(conformance_class, model_id, case, got)
    report_metrics(request, {name: getattr(cmp, name) for name in metrics})
    if cmp.unnamed_top1:  # an engine that cannot name every candidate: judged on those it names
        report_metrics(request, {"unnamed_top1": float(cmp.unnamed_top1)})
    if reason := checks.unjudged(got, cmp):
        refused(f"{label}: {reason}")
    fail_if(failure, label)
