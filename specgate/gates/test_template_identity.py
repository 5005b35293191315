"""Template identity gate: the rendered prompt reaches the model as the same token ids.

For every conversation transformers renders (``snapshots/<model>/template.json``,
cases ``ids/<conversation>/<gen|no-gen>``, each with its conversation), the engine
renders it with its own ``render`` and tokenizes the result with its own
``encode(parse_special=True)``; the ids must equal llama.cpp's tokenization of the
transformers prompt. A render that is right byte for byte but tokenized with the
special-token markers split into pieces fails here, as does a template read from the
wrong place. (The snapshot also records the sha256 of the GGUF template and of
``tokenizer_config.json``'s, which the recording test requires to be equal.)

Needs both ``render`` and ``encode``; an engine without either is n/a.
"""

import pytest

from specgate.outcomes.gate import call, fail_if, first_divergence

pytestmark = pytest.mark.gate("template", cases="ids/")


def test_template_ids(engine, model, model_id, case_id, case):
    call(engine, "encode", model, "", True)  # n/a before any rendering when encode is not offered
    prompt = call(engine, "render", model, case["messages"], case["add_generation_prompt"], **case["kwargs"])
    diff = first_divergence(case["ids"], call(engine, "encode", model, prompt, True))
    fail_if(diff and f"prompt token ids differ\n{diff}", f"stage template, model {model_id}, case {case_id}")
