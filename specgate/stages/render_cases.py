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
from collections.abc import Callable
from typing import Any

from impl.protocol import Unsupported
from specgate.upkeep import corpus


def sha256_of(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def answered(key: str, render: Callable[[], str]) -> dict[str, Any]:
    """``{key: render()}``, or ``{"error": ...}`` when the template refuses."""
    from impl.hf.render import template_error

    try:
        return {key: render()}
    except Unsupported as exc:
        return {"error": template_error(exc)}


def render_cases(hf: Any, model: Any) -> dict[str, Any]:
    """Each corpus conversation with transformers' answer: ``{"prompt"}`` or ``{"error"}``."""
    cases = {}
    for case_id, case in corpus.render_cases().items():
        answer = answered(
            "prompt", lambda c=case: hf.render(model, c.messages, c.add_generation_prompt, **c.kwargs)
        )
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
    cases = {}
    for case_id, construct in corpus.constructs().items():
        answer = answered("output", lambda c=construct: hf.render_template(c["template"], c["context"]))
        cases[case_id] = {**construct, **answer}
    return cases
