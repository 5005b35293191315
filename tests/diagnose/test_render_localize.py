"""Localization inside the chat template (issue 35): a failing render case is put down to
the template construct that produced the first character where the engine's text departs
from the reference's render — from the engine's answer alone. Each planted engine below
is written here (a rewritten template source, another environment setting or filter, a
dropped argument), and the construct each must be put down to is found here by searching
the template's source, independently of ``specgate.diagnose.render_localize``."""

from __future__ import annotations

import json
from pathlib import Path

import jinja2.utils
import pytest

from oracle.template import ChatTemplate, template_context
from oracle.template_sandbox import TemplateSandbox
from specgate.diagnose.localize import cause_of
from specgate.diagnose.render import reference
from specgate.diagnose.render_localize import localize_render, marked
from specgate.plugin import model_missing
from specgate.supply import models as model_cache
from specgate.upkeep import corpus

MODEL = "qwen3-vocab"
TOOLS = [
    {"type": "function", "function": {"name": "plain", "description": "adds two numbers"}},
    {"type": "function", "function": {"name": "html", "description": "true when a < b & b > c"}},
]
CHAT = [
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": "\n\nHello", "reasoning_content": "r"},
]


def _template(model_id: str) -> ChatTemplate:
    if model_id not in model_cache.cached_models():
        model_missing(f"{model_id}; run: specgate models fetch {model_id}")
    ref = reference(model_cache.model_ref(model_id))
    return ChatTemplate(ref.source, ref.special_tokens)


@pytest.fixture(scope="module")
def qwen3() -> ChatTemplate:
    return _template(MODEL)


def line_of(source: str, needle: str) -> int:
    """The one line of ``source`` holding ``needle`` (1-based)."""
    found = [n for n, text in enumerate(source.splitlines(), 1) if needle in text]
    assert len(found) == 1, (needle, found)
    return found[0]


def text_of(source: str, needle: str) -> str:
    return source.splitlines()[line_of(source, needle) - 1].strip()


def context(t: ChatTemplate, messages: list, generation: bool, **kwargs) -> dict:
    return template_context(messages, generation, t.special_tokens, **kwargs)


def test_the_generation_prompt_dropped(qwen3: ChatTemplate) -> None:
    engine = qwen3.render(CHAT, add_generation_prompt=False)  # ignores add_generation_prompt
    line = localize_render(qwen3.source, context(qwen3, CHAT, True), engine)
    header = text_of(qwen3.source, "'<|im_start|>assistant\\n' }}")
    assert line.startswith(f"render: the engine's text stops at offset {len(engine)}, "), line
    assert (
        f"comes from the template's line {line_of(qwen3.source, header)}, the output expression {header}"
        in line
    )
    assert f"(inside {text_of(qwen3.source, 'if add_generation_prompt')})" in line, line
    assert (
        cause_of(line)
        == f"render: text missing from the template's line {line_of(qwen3.source, header)}, the output expression {header}"
    )


def test_tojson_escaping_html(qwen3: ChatTemplate) -> None:
    """jinja2's own tojson (``<`` as ``\\u003c``): the second tool is the first with one."""
    env = TemplateSandbox()
    env.filters["tojson"] = lambda x, **kw: str(jinja2.utils.htmlsafe_json_dumps(x, dumps=json.dumps))
    ctx = context(qwen3, CHAT, True, tools=TOOLS)
    engine = env.render(env.from_string(qwen3.source), dict(ctx))
    line = localize_render(qwen3.source, ctx, engine)
    expression = text_of(qwen3.source, "tool | tojson")
    assert (
        line.startswith("render: the first differing character (offset ")
        and "engine '\\\\' vs reference '<')" in line
    )
    assert (
        f"comes from the template's line {line_of(qwen3.source, expression)}, the output expression {expression} "
        in line
    )
    assert f"{text_of(qwen3.source, 'for tool in tools')}, iteration 2)" in line, line


def test_a_content_not_trimmed(qwen3: ChatTemplate) -> None:
    """The engine's template prints the last assistant turn's content without ``lstrip('\\n')``."""
    turn = text_of(qwen3.source, "content.lstrip('\\n') }}")
    planted = ChatTemplate(qwen3.source.replace(turn, turn.replace("content.lstrip('\\n') }}", "content }}")))
    engine = planted.render(CHAT, add_generation_prompt=False)
    line = localize_render(qwen3.source, context(qwen3, CHAT, False), engine)
    n = line_of(qwen3.source, turn)
    assert "(offset " in line and "engine '\\n' vs reference 'H')" in line, line
    assert f"comes from the template's line {n}, the output expression {turn[:40]}" in line, line
    assert f"(inside {text_of(qwen3.source, 'for message in messages %}')}, iteration 2, " in line, line


#: A template whose newlines after tags only ``trim_blocks`` removes.
TRIMMED = """{% for message in messages %}
<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endfor %}
{% if add_generation_prompt %}
<|im_start|>assistant
<think>
{% endif %}"""
TURNS = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]


def trimmed(generation: bool) -> str:
    return TemplateSandbox().from_string(TRIMMED).render(messages=TURNS, add_generation_prompt=generation)


def test_trim_blocks_off() -> None:
    env = TemplateSandbox()
    env.trim_blocks = env.lstrip_blocks = False
    engine = env.from_string(TRIMMED).render(messages=TURNS, add_generation_prompt=True)
    line = localize_render(TRIMMED, {"messages": TURNS, "add_generation_prompt": True}, engine)
    assert line.startswith(
        "render: the first differing character (offset 0, engine '\\n' vs reference '<')"
    ), line
    n = line_of(TRIMMED, "<|im_start|>{{")
    assert line.endswith(f"comes from the template's line {n}, the literal text '<|im_start|>' "
                         f"(inside {{% for message in messages %}}, iteration 1)"), line  # fmt: skip


def test_the_iteration_and_the_line_inside_a_literal() -> None:
    reference = trimmed(False)
    at = reference.index("yo")
    engine = reference[:at] + "YO" + reference[at + 2 :]  # right up to the second turn's content
    line = localize_render(TRIMMED, {"messages": TURNS, "add_generation_prompt": False}, engine)
    n = line_of(TRIMMED, "{{ message.content }}")
    assert f"comes from the template's line {n}, the output expression {{{{ message.content }}}} " in line, (
        line
    )
    assert line.endswith("(inside {% for message in messages %}, iteration 2)"), line
    engine = trimmed(True).replace("<think>", "<THINK>")  # the generation prompt's second line
    line = localize_render(TRIMMED, {"messages": TURNS, "add_generation_prompt": True}, engine)
    assert line.endswith(
        f"comes from the template's line {line_of(TRIMMED, '>assistant')}, the literal text "
        f"'<|im_start|>assistant\\n<think>\\n' (the character is on line {line_of(TRIMMED, '<think>')}; "
        f"inside {{% if add_generation_prompt %}})"
    ), line


def test_extra_text_past_the_reference() -> None:
    reference = trimmed(False)
    line = localize_render(
        TRIMMED, {"messages": TURNS, "add_generation_prompt": False}, reference + "<|im_start|>"
    )
    assert line.startswith(
        f"render: the engine's text goes on past the reference's end (offset {len(reference)}, 12 more"
    ), line
    where = f"the template's line {line_of(TRIMMED, '}}<|im_end|>')}, the literal text '<|im_end|>\\n'"
    assert f"comes from {where} (inside {{% for message in messages %}}, iteration 2)" in line, line
    assert cause_of(line) == f"render: extra text after {where}"


def test_one_construct_is_one_cause(qwen3: ChatTemplate) -> None:
    """Two cases departing in one construct (other offsets, other iterations) share a cause;
    another construct is another cause."""
    ctx = context(qwen3, CHAT, True)
    reference = qwen3.render(CHAT, add_generation_prompt=True)
    user, assistant = reference.index("hi"), reference.index("Hello")
    lines = [
        localize_render(qwen3.source, ctx, reference[:at] + "#" + reference[at + 1 :])
        for at in (user, user + 1, assistant)
    ]
    assert "offset" in lines[0] and lines[0] != lines[1], lines
    assert cause_of(lines[0]) == cause_of(lines[1]) != cause_of(lines[2]) != "", lines
    assert str(user) not in cause_of(lines[0]) and "iteration" not in cause_of(lines[0])


def test_render_groups_of_one_construct_merge_into_one() -> None:
    """Two render groups (other messages and sites) departing in one construct of one template,
    at other offsets and iterations, are one group headed by the construct; a group departing
    in another construct stays its own."""
    from specgate.outcomes.verdict import GateRecord
    from specgate.run import triage

    reference, ctx = trimmed(False), {"messages": TURNS, "add_generation_prompt": False}
    records = [
        GateRecord("render", "constructs", "fail", f"render[{site}/{i}]", message, case=f"{site}{i}",
                   answers={"site": site})
        for site, message, n in (("at the start", "rendered prompt differs", 3), ("elsewhere", "prompt too long", 2),
                                 ("at the end", "prompt too short", 1))
        for i in range(n)
    ]  # fmt: skip
    groups = triage.group_records(records)
    assert len(groups) == 3
    for group, at in zip(
        groups, (reference.index("hi"), reference.index("yo") + 1, reference.index("user")), strict=True
    ):
        group.localized = localize_render(TRIMMED, ctx, reference[:at] + "#" + reference[at + 1 :])
    merged = triage.merge_by_cause(groups, cause_of)
    assert [len(g.records) for g in merged] == [5, 1], [g.localized for g in merged]
    where = f"the template's line {line_of(TRIMMED, '{{ message.content }}')}, the output expression {{{{ message.content }}}}"
    role = f"the template's line {line_of(TRIMMED, '{{ message.role }}')}, the output expression {{{{ message.role }}}}"
    assert merged[0].cause == f"render: {where}" and merged[1].cause == f"render: {role}"


#: Output a caller trims or measures: a macro's, a ``{% set %}`` block's.
CAPTURED = """{% macro item(x) %}  [{{ x }}]  {% endmacro %}
{% set note %} {{ n }} {% endset %}
<{{ item(n) | trim }}|{{ note | length }}>"""


def test_captured_output_is_put_down_to_the_expression_printing_it() -> None:
    reference = TemplateSandbox().from_string(CAPTURED).render(n=7)
    assert reference == "<[7]|3>"
    line = localize_render(CAPTURED, {"n": 7}, "<[8]|3>")
    expression = "{{ item(n) | trim }}"
    assert line.endswith(
        f"comes from the template's line {line_of(CAPTURED, expression)}, the output expression {expression}"
    ), line
    line = localize_render(CAPTURED, {"n": 7}, "<[7]|4>")
    n = line_of(CAPTURED, "{{ note | length }}")
    assert line.endswith(
        f"comes from the template's line {n}, the output expression {{{{ note | length }}}}"
    ), line


def test_markers_in_the_input_are_not_localized() -> None:
    line = localize_render("{{ m }}!", {"m": "a\U00100000b"}, "ab!")
    assert line.startswith("not localized:") and "markers" in line, line


def test_a_marked_render_that_differs_is_not_localized() -> None:
    """A block printed through ``self`` and measured: its marks change what is printed, and
    the check says so rather than naming a construct."""
    line = localize_render("{% block a %}xy{% endblock %}|{{ self.a() | length }}", {}, "xy|3")
    assert line == "not localized: the marked template renders other text than the template", line


def test_the_reference_itself_is_not_localized(qwen3: ChatTemplate) -> None:
    for case in list(corpus.render_cases().values())[:6]:
        ctx = context(qwen3, case.messages, case.add_generation_prompt, **case.kwargs)
        assert localize_render(
            qwen3.source, ctx, qwen3.render(case.messages, case.add_generation_prompt, **case.kwargs)
        ) == ("not localized: the engine's text is the reference's")


@pytest.mark.parametrize(
    "model_id", ["qwen2.5-coder-0.5b-instruct", "deepseek-r1-distill-qwen-7b-vocab", MODEL]
)
def test_the_markers_never_change_the_render(model_id: str) -> None:
    """For every corpus conversation the template renders, the marked render stripped of its
    markers is the plain render, and every character comes from some construct."""
    template, env = _template(model_id), TemplateSandbox()
    marks, plain = marked(env, template.source), env.from_string(template.source)
    rendered = 0
    for case in corpus.render_cases().values():
        try:
            ctx = context(template, case.messages, case.add_generation_prompt, **case.kwargs)
            expected = env.render(plain, dict(ctx))
        except Exception:
            continue
        got = marks.render(env, ctx)
        assert got.text == expected, case
        assert all(got.at(i) is not None for i in range(0, len(expected), 7))
        rendered += 1
    assert rendered >= 30


def test_the_markers_never_change_a_construct_template() -> None:
    env, rendered = TemplateSandbox(), 0
    for case_id, case in corpus.constructs().items():
        try:
            expected = env.render(env.from_string(case["template"]), dict(case["context"]))
        except Exception:
            continue
        assert marked(env, case["template"]).render(env, case["context"]).text == expected, case_id
        rendered += 1
    assert rendered >= 50


@pytest.mark.slow
def test_a_render_group_of_a_run_gets_its_localized_line(tmp_path: Path, qwen3: ChatTemplate) -> None:
    """A planted engine (``fixable_template.py``: the generation prompt dropped) gated on
    render: its failing groups say the construct the missing text comes from, in the JSON
    and Markdown reports."""
    from specgate.safe_io.text_safety import md_text
    from tests.engines.parity_run import planted_run

    run = planted_run(tmp_path, "fixable_template.py", "no_gen", "render", MODEL)
    assert run.status == 1, run.output[-3000:]
    failing = [g for g in run.report["groups"] if g["outcome"] == "fail"]
    header = text_of(qwen3.source, "'<|im_start|>assistant\\n' }}")
    where = f"comes from the template's line {line_of(qwen3.source, header)}, the output expression {header}"
    assert failing and all(where in g["localized"] for g in failing), [g["localized"] for g in failing]
    md = next((tmp_path / "reports").glob("parity-*.md")).read_text("utf-8")
    assert all(f"**Localized:** {md_text(g['localized'])}" in md for g in failing), md[:3000]
