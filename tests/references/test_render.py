"""Record the render stage's reference outputs (transformers; llama.cpp for ids).

Every case carries its inputs (the conversation: ``messages``,
``add_generation_prompt``, ``kwargs``; a construct: ``construct``, ``template``,
``context``) beside the reference's answer.

* ``snapshots/<model>/render.json`` — every corpus conversation through the model's
  own template with ``apply_chat_template(tokenize=False)``: ``{"prompt": str}``, or
  ``{"error": {"type", "message", "raised_by_template"}}`` when the template refuses.
* ``snapshots/<model>/template.json`` — template identity: the sha256 of the GGUF's
  ``tokenizer.chat_template`` (as llama.cpp reads it) and of ``tokenizer_config.json``'s
  where the model ships one (they must be equal), and for every rendered
  conversation the ids llama.cpp's tokenizer gives the transformers prompt
  (``parse_special=True``).
* ``snapshots/constructs/render_template.json`` — each construct template rendered
  by transformers' compiled environment.

The cases are built by ``specgate.stages.render_cases``.
"""

from __future__ import annotations

import pytest

from specgate.stages import STAGES
from specgate.stages.render_cases import construct_cases
from specgate.supply.models import has_chat_template, is_known_id
from specgate.upkeep import corpus, snapshots


def ships_a_template(model_id: str, model_of) -> bool:
    """A template model, or a user's own GGUF (``--model PATH``) carrying ``tokenizer.chat_template``."""
    return model_id in corpus.TEMPLATE_MODELS or (
        not is_known_id(model_id) and has_chat_template(model_of(model_id))
    )


pytestmark = [pytest.mark.live, pytest.mark.applies_to.with_args(ships_a_template, models=True)]

HF_WHAT = "transformers apply_chat_template(tokenize=False) with the model's own template"


def test_record_render(request, reference, model, model_id):
    hf = reference("hf")
    cases = STAGES["render"].build(hf, model)
    assert any("prompt" in c for c in cases.values()), f"{model_id}: transformers rendered no conversation"
    snapshots.record(
        request,
        hf,
        model,
        "render",
        cases,
        references={"hf": HF_WHAT},
        packages=("transformers", "jinja2"),
    )


def test_record_template_identity(request, reference, model, model_id):
    hf, llama = reference("hf"), reference("llamacpp")
    cases = STAGES["template"].build(hf, llama, model)
    snapshots.record(
        request,
        llama,
        model,
        "template",
        cases,
        references={
            "hf": HF_WHAT,
            "llamacpp": "llama_tokenize(parse_special=True) of that prompt; "
            "llama_model_chat_template for the GGUF template",
        },
        packages=("transformers", "jinja2", "llama-cpp-python"),
    )


def test_record_constructs(request, reference):
    if snapshots.root_of(request.config) != snapshots.SNAPSHOT_ROOT:
        pytest.skip("the construct templates belong to the repository's snapshots, not a --snapshot-dir")
    hf = reference("hf")
    cases = construct_cases(hf)
    snapshots.record(
        request,
        hf,
        corpus.constructs_model(),
        "render_template",
        cases,
        references={
            "hf": "transformers.utils.chat_template_utils._compile_jinja_template(t).render(**context)"
        },
        packages=("transformers", "jinja2"),
    )
