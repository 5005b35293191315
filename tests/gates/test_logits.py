"""Logits gate: the engine's logits for every position of each prompt, judged in the
``exact`` class (against transformers' float32 forward on the same dequantized
weights) and the ``quantized`` class (against llama.cpp on the same GGUF). The rules
and tolerances are in ``specgate.checks.logits``; an unclaimed class is n/a. The
engine computes each prompt's logits once, whichever classes read them."""

import numpy as np
import pytest

from specgate.checks import logits as checks
from specgate.gate import call, claims, fail_if

pytestmark = pytest.mark.gate("logits")


def test_logits(engine, specgate, model, model_id, case_id, case, conformance_class, request):
    reference, metrics = checks.CLASSES[conformance_class]
    label = f"[logits/{conformance_class}] model {model_id}, prompt {case_id} ({len(case['ids'])} tokens), vs {reference}"
    claims(engine, "logits", conformance_class)
    got = specgate.answers.get(
        ("logits", model.id, tuple(case["ids"])),
        lambda: np.asarray(call(engine, "logits", model, case["ids"]), dtype=np.float32),
    )
    fail_if(checks.well_formed(case, got), label)
    failure, cmp = checks.check(conformance_class, model_id, case, got)
    request.node.user_properties.extend((f"metric:{name}", getattr(cmp, name)) for name in metrics)
    fail_if(failure, label)
