"""Template identity gate: the rendered prompt reaches the model as the same token ids.

For every conversation transformers renders (``snapshots/<model>/template.json``),
the engine renders it with its own ``render`` and tokenizes the result with its own
``encode(parse_special=True)``; the ids must equal llama.cpp's tokenization of the
transformers prompt. A render that is right byte for byte but tokenized with the
special-token markers split into pieces fails here, as does a template read from
the wrong place. (The snapshot also records the sha256 of the GGUF template and of
``tokenizer_config.json``'s, which the recording test requires to be equal.)

Needs both ``render`` and ``encode``; an engine without either is n/a.
"""

from __future__ import annotations

import pytest

from specgate import render_corpus
from specgate.gate import call, fail_if, first_divergence
from specgate.plugin import gate_params, snapshot_cases

pytestmark = pytest.mark.gate("template")

IDENTITY = "template-identity"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if {"model_id", "case_id"} <= set(metafunc.fixturenames):
        params = [p for p in gate_params(metafunc.config, "template") if p.values[1] != IDENTITY]
        metafunc.parametrize(("model_id", "case_id"), params)


def test_template_ids(engine, model, model_id, case_id):
    expected = snapshot_cases(model, "template")[case_id]["ids"]
    case = render_corpus.render_cases()[case_id.removeprefix("ids/")]
    call(engine, "encode", model, "", True)  # n/a before any rendering when encode is not offered
    prompt = call(engine, "render", model, case.messages, case.add_generation_prompt, **case.kwargs)
    ids = call(engine, "encode", model, prompt, True)
    diff = first_divergence(expected, ids)
    fail_if(diff and f"prompt token ids differ\n{diff}", f"stage template, model {model_id}, case {case_id}")
