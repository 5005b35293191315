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
"""

from __future__ import annotations

import hashlib
import json

import pytest

from impl.protocol import Unsupported
from specgate.supply.models import has_chat_template, is_known_id
from specgate.upkeep import corpus, snapshots


def ships_a_template(model_id: str, model_of) -> bool:
    """A template model, or a user's own GGUF (``--model PATH``) carrying ``tokenizer.chat_template``."""
    return model_id in corpus.TEMPLATE_MODELS or (
        not is_known_id(model_id) and has_chat_template(model_of(model_id))
    )


pytestmark = [pytest.mark.live, pytest.mark.applies_to.with_args(ships_a_template, models=True)]

HF_WHAT = "transformers apply_chat_template(tokenize=False) with the model's own template"


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def reference_renders(hf, model) -> dict:
    from impl.hf.render import template_error

    cases = {}
    for case_id, case in corpus.render_cases().items():
        try:
            answer = {"prompt": hf.render(model, case.messages, case.add_generation_prompt, **case.kwargs)}
        except Unsupported as exc:
            answer = {"error": template_error(exc)}
        cases[case_id] = {**case.inputs(), **answer}
    return cases


def inputs_of(case: dict) -> dict:
    """A recorded render case without transformers' answer: the conversation alone."""
    return {k: v for k, v in case.items() if k not in ("prompt", "error")}


def test_record_render(request, reference, model, model_id):
    hf = reference("hf")
    cases = reference_renders(hf, model)
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
    from impl.llamacpp import render as llamacpp_render

    hf, llama = reference("hf"), reference("llamacpp")
    gguf_template = llamacpp_render.model_template(llama.llama(model, vocab_only=True)).decode("utf-8")
    identity = {"gguf_template_sha256": _sha256(gguf_template), "tokenizer_config_template_sha256": None}
    if model.tokenizer_config is not None:
        config_template = json.loads(model.tokenizer_config.read_text(encoding="utf-8"))["chat_template"]
        identity["tokenizer_config_template_sha256"] = _sha256(config_template)
        assert config_template == gguf_template, (
            f"{model_id}: the GGUF's tokenizer.chat_template differs from tokenizer_config.json's "
            f"(sha256 {identity['gguf_template_sha256']} vs {identity['tokenizer_config_template_sha256']})"
        )
    cases = {"template-identity": identity}
    for case_id, rendered in reference_renders(hf, model).items():
        if "prompt" in rendered:
            ids = llama.encode(model, rendered["prompt"], parse_special=True)
            cases[f"ids/{case_id}"] = {**inputs_of(rendered), "ids": ids}
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
    from impl.hf.render import template_error

    if snapshots.root_of(request.config) != snapshots.SNAPSHOT_ROOT:
        pytest.skip("the construct templates belong to the repository's snapshots, not a --snapshot-dir")
    hf = reference("hf")
    cases = {}
    for case_id, construct in corpus.constructs().items():
        try:
            answer = {"output": hf.render_template(construct["template"], construct["context"])}
        except Unsupported as exc:
            answer = {"error": template_error(exc)}
        cases[case_id] = {**construct, **answer}
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
