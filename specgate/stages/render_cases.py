"""How the render stages' cases are built from the references (``Stage.build``): every
corpus conversation through the model's own template by transformers
(``render_cases``: the prompt, or the template's refusal), the template identity and
llama.cpp's ids of each rendered prompt (``template_cases``), and each construct
template rendered by transformers' compiled environment (``construct_cases``). Every
case carries its inputs beside the reference's answer. The reference adapters are
arguments: the recorder (``tests/references/test_render.py``) fetches them."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from impl.protocol import Unsupported
from specgate.upkeep import corpus


def sha256_of(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def render_cases(hf: Any, model: Any) -> dict[str, Any]:
    """Each corpus conversation with transformers' answer: ``{"prompt"}`` or ``{"error"}``."""
    from impl.hf.render import template_error

    cases = {}
    for case_id, case in corpus.render_cases().items():
        try:
            answer = {"prompt": hf.render(model, case.messages, case.add_generation_prompt, **case.kwargs)}
        except Unsupported as exc:
            answer = {"error": template_error(exc)}
        cases[case_id] = {**case.inputs(), **answer}
    return cases


def inputs_of(case: dict[str, Any]) -> dict[str, Any]:
    """A recorded render case without transformers' answer: the conversation alone."""
    return {k: v for k, v in case.items() if k not in ("prompt", "error")}


def template_cases(hf: Any, llama: Any, model: Any) -> dict[str, Any]:
    """``template-identity`` (the sha256 of the GGUF's ``tokenizer.chat_template`` as
    llama.cpp reads it, and of ``tokenizer_config.json``'s where shipped: they must be
    equal) and ``ids/<case>``: llama.cpp's ids (``parse_special=True``) of every prompt
    transformers renders."""
    from impl.llamacpp import render as llamacpp_render

    gguf_template = llamacpp_render.model_template(llama.llama(model, vocab_only=True)).decode("utf-8")
    identity = {"gguf_template_sha256": sha256_of(gguf_template), "tokenizer_config_template_sha256": None}
    if model.tokenizer_config is not None:
        config_template = json.loads(model.tokenizer_config.read_text(encoding="utf-8"))["chat_template"]
        identity["tokenizer_config_template_sha256"] = sha256_of(config_template)
        if config_template != gguf_template:
            raise ValueError(
                f"{model.id}: the GGUF's tokenizer.chat_template differs from tokenizer_config.json's "
                f"(sha256 {identity['gguf_template_sha256']} vs {identity['tokenizer_config_template_sha256']})"
            )
    cases: dict[str, Any] = {"template-identity": identity}
    for case_id, rendered in render_cases(hf, model).items():
        if "prompt" in rendered:
            ids = llama.encode(model, rendered["prompt"], parse_special=True)
            cases[f"ids/{case_id}"] = {**inputs_of(rendered), "ids": ids}
    return cases


def construct_cases(hf: Any) -> dict[str, Any]:
    """Each construct template with transformers' ``{"output"}`` or ``{"error"}``."""
    from impl.hf.render import template_error

    cases = {}
    for case_id, construct in corpus.constructs().items():
        try:
            answer = {"output": hf.render_template(construct["template"], construct["context"])}
        except Unsupported as exc:
            answer = {"error": template_error(exc)}
        cases[case_id] = {**construct, **answer}
    return cases
