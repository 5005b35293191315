"""The oracle's chat-template renderer: refusals, the sandbox, fallback, incremental render.

Byte-for-byte agreement with transformers is the render gate's job
(specgate/gates/test_render.py, from snapshots) and the property tests'
(test_template_properties.py, live). Here: what the renderer must refuse and how
it says so — the checks are in ``template_checks.py``, where the mutation tests show
each one catching a planted defect.
"""

from __future__ import annotations

import time
import warnings

import pytest

from oracle import template as tpl
from oracle.gguf import open_gguf
from specgate.supply.models import model_ref
from specgate.upkeep import corpus
from tests.oracle.template_checks import HOSTILE, REFUSALS, hostile_problem, refusal_problem


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_template_refused_within_a_second(name):
    source, expect = HOSTILE[name]
    problem = hostile_problem(source, expect)
    assert problem is None, f"hostile template {name}: {problem}"


def test_hostile_corpus_size():
    assert len(HOSTILE) >= 15


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_refusal_names_construct_and_line(case):
    problem = refusal_problem(*REFUSALS[case])
    assert problem is None, f"{case}: {problem}"


def test_raise_exception_message_is_kept_verbatim():
    source = "{{ raise_exception('Only user/assistant roles are supported!') }}"
    with pytest.raises(tpl.TemplateRefusal) as info:
        tpl.render_template(source, {})
    assert info.value.construct == "raise_exception"
    assert info.value.template_message == "Only user/assistant roles are supported!"


def test_canary_refuses_at_load_not_at_first_prompt():
    # Compiles fine; fails only when rendering an assistant turn — the canary has one.
    source = "{% for m in messages %}{% if m.role == 'assistant' %}{{ m.content | no_such }}{% endif %}{% endfor %}"
    with pytest.raises(tpl.TemplateRefusal, match="filter 'no_such'"):
        tpl.ChatTemplate(source)
    source = (
        "{% for m in messages %}{% if m.role == 'assistant' %}{{ m.content.nope() }}{% endif %}{% endfor %}"
    )
    with pytest.raises(tpl.TemplateRefusal, match="attribute 'nope'"):
        tpl.ChatTemplate(source)


def test_chatml_only_without_a_template():
    with pytest.warns(tpl.ChatMLFallbackNotice, match="no tokenizer.chat_template"):
        fallback = tpl.chat_template_for({})
    assert fallback.is_fallback and fallback.notice
    assert fallback.render([{"role": "user", "content": "hi"}], add_generation_prompt=True) == (
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a model with a template: no notice, and a broken one is refused
        assert not tpl.chat_template_for({"tokenizer.chat_template": "{{ messages[0].content }}"}).is_fallback
        with pytest.raises(tpl.TemplateRefusal):
            tpl.chat_template_for({"tokenizer.chat_template": "{{ messages | splitlines }}"})


def test_messages_prepared_like_transformers():
    # transformers drops None-valued keys and aliases reasoning under "thinking" (first)
    # and "reasoning_content" (last): key order shows in ``message | tojson``.
    prepared = tpl.prepare_messages([{"role": "assistant", "content": None, "reasoning": "r", "x": 1}])
    assert prepared == [
        {"thinking": "r", "role": "assistant", "reasoning": "r", "x": 1, "reasoning_content": "r"}
    ]
    assert list(prepared[0]) == ["thinking", "role", "reasoning", "x", "reasoning_content"]
    with pytest.raises(ValueError, match="empty conversation"):
        tpl.prepare_messages([])
    with pytest.raises(TypeError, match="should be dicts"):
        tpl.prepare_messages(["hello"])


def test_context_special_tokens_and_kwargs():
    source = (
        "{{ bos_token }}|{{ eos_token }}|{{ tools }}|{{ documents }}|{{ add_generation_prompt }}|{{ flag }}"
    )
    t = tpl.ChatTemplate(source, {"bos_token": "<s>", "eos_token": "</s>"})
    assert t.render([{"role": "user", "content": "x"}], flag=3) == "<s>|</s>|None|None|False|3"
    assert t.render([{"role": "user", "content": "x"}], eos_token="E") == "<s>|E|None|None|False|"


# ---------------------------------------------------------------------------
# incremental render


def model_template(model_id: str) -> tpl.ChatTemplate:
    model = model_ref(model_id)
    return tpl.chat_template_for(open_gguf(model.gguf, header_only=True).metadata, model.tokenizer_config)


HISTORY = [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4"}]
NEW = [{"role": "user", "content": "And 3+3?"}]


def test_delta_appends_only_the_new_turn():
    qwen25 = model_template("qwen2.5-coder-0.5b-instruct")
    assert tpl.delta(qwen25, HISTORY, NEW) == "<|im_start|>user\nAnd 3+3?<|im_end|>\n<|im_start|>assistant\n"


def test_delta_refuses_when_history_rerenders_differently():
    # Qwen3 keeps the reasoning of the last assistant turn only while it follows the
    # last user query; a new user turn drops it from history, so no suffix is valid.
    qwen3 = model_template("qwen3-vocab")
    history = [HISTORY[0], {"role": "assistant", "content": "4", "reasoning_content": "2+2 is 4."}]
    with pytest.raises(tpl.NotAppendOnly, match="not append-only"):
        tpl.delta(qwen3, history, NEW)
    plain = tpl.delta(qwen3, HISTORY[:1], [{"role": "assistant", "content": "4"}, *NEW])
    assert plain.endswith("<|im_start|>user\nAnd 3+3?<|im_end|>\n<|im_start|>assistant\n")


def test_long_conversation_renders_inside_the_budget():
    conversation = [
        m
        for i in range(200)
        for m in ({"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"})
    ]
    qwen3 = model_template("qwen3-vocab")
    start = time.perf_counter()
    prompt = qwen3.render(conversation, add_generation_prompt=True)
    elapsed = time.perf_counter() - start
    assert prompt.count("<|im_start|>") == 401
    print(f"400-message Qwen3 render: {elapsed * 1000:.1f} ms")


@pytest.mark.parametrize("model_id", corpus.TEMPLATE_MODELS)
def test_oracle_reads_the_template_llamacpp_reads(specgate, model_id):
    """The template the oracle loads is byte-identical to the GGUF template whose
    sha256 the template-identity snapshot recorded (read there through llama.cpp)."""
    recorded = specgate.snapshot_cases(model_ref(model_id), "template")["template-identity"]
    assert model_template(model_id).sha256 == recorded["gguf_template_sha256"]
