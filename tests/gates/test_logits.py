"""Logits gate: the engine's logits for every position of each prompt, judged in the
``exact`` class (against transformers' float32 forward on the same dequantized
weights) and the ``quantized`` class (against llama.cpp on the same GGUF). The rules
and tolerances are in ``specgate.checks.logits``; an unclaimed class is n/a. The
engine computes each prompt's logits once, whichever classes read them."""

from __future__ import annotations

import json

import numpy as np
import pytest

from specgate import snapshots
from specgate.checks import logits as checks
from specgate.gate import call, fail_if
from specgate.plugin import CONFORMANCE_CLASSES, SESSION, claims, snapshot_cases
from tests.forward_corpus import forward_models

pytestmark = pytest.mark.gate("logits")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if {"model_id", "case_id"} <= set(metafunc.fixturenames):
        params = []
        root = metafunc.config.stash[SESSION].snapshot_root
        have = set(snapshots.available("logits", root))
        for model_id in forward_models(metafunc.config):
            if model_id in have:
                path = snapshots.path_for(model_id, "logits", root)
                for case_id in json.loads(path.read_text("utf-8"))["cases"]:
                    params.append(pytest.param(model_id, case_id, id=f"{model_id}/{case_id}"))
        metafunc.parametrize(("model_id", "case_id"), params)
        # The class varies fastest: both classes of a prompt run back to back on one forward.
        metafunc.parametrize("conformance_class", CONFORMANCE_CLASSES)


def test_logits(engine, specgate, model, model_id, case_id, conformance_class, request):
    case = snapshot_cases(model, "logits")[case_id]
    reference, metrics = checks.CLASSES[conformance_class]
    label = f"[logits/{conformance_class}] model {model_id}, prompt {case_id} ({len(case['ids'])} tokens), vs {reference}"
    if engine.offers("logits"):
        claims(engine, conformance_class)
    got = specgate.answers.get(
        ("logits", model.id, tuple(case["ids"])),
        lambda: np.asarray(call(engine, "logits", model, case["ids"]), dtype=np.float32),
    )
    fail_if(checks.well_formed(case, got), label)
    failure, cmp = checks.check(conformance_class, model_id, case, got)
    for name in metrics:
        request.node.user_properties.append((f"metric:{name}", getattr(cmp, name)))
    fail_if(failure, label)
