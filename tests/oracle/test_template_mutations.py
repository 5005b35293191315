"""Mutation evidence for the render stage: each planted defect is caught by the named check.

* sandbox turned off (a plain jinja2 environment) → the hostile-corpus check
  (``test_template.hostile_problem``) reports the hostile template as rendered;
* a render error swallowed into a generic ChatML prompt → the render gate
  (``specgate/gates/test_render.py::test_render``, the function ``nox -s parity`` runs)
  fails on a conversation transformers refuses, and the construct gate fails on the
  template's own ``raise_exception``;
* a refusal message without the construct or without the line → the refusal-message
  check (``test_template.refusal_problem``) reports what is missing.
"""

from __future__ import annotations

import jinja2
import jinja2.ext
import pytest

from impl.oracle import OracleEngine
from oracle import template as tpl
from oracle import template_env, template_sandbox
from specgate.gates import test_render as gate
from specgate.supply.models import model_ref
from specgate.upkeep.corpus import constructs_model
from tests.gate_request import run_gate
from tests.oracle import template_checks as checks

# Only templates that are harmless when run unsandboxed (introspection, no calls
# into os/subprocess, no huge allocations) are used against the mutant.
SAFE_HOSTILE = ("01_str_class_mro", "03_self_dict", "06_getitem_dunder")


def unsandboxed() -> jinja2.Environment:
    """transformers' options on a plain, unsandboxed environment."""
    env = jinja2.Environment(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[template_env.GenerationTag, jinja2.ext.loopcontrols],
    )
    env.render = lambda template, context, limits: template.render(context)  # the sandbox's render signature
    return env


@pytest.mark.parametrize("name", SAFE_HOSTILE)
def test_sandbox_off_is_caught_by_the_hostile_check(monkeypatch, name):
    source, expect = checks.HOSTILE[name]
    assert checks.hostile_problem(source, expect) is None  # the real sandbox refuses it
    monkeypatch.setattr(tpl, "environment", unsandboxed)
    problem = checks.hostile_problem(source, expect)
    assert problem is not None and "NOT refused" in problem, problem


def chatml_on_error(real=tpl.ChatTemplate.render):
    """The defect the spec warns about: a failing template silently replaced by ChatML."""

    def render(self, messages, add_generation_prompt=False, **kwargs):
        try:
            return real(self, messages, add_generation_prompt, **kwargs)
        except tpl.TemplateRefusal:
            turns = "".join(
                f"<|im_start|>{m.get('role')}\n{m.get('content') or ''}<|im_end|>\n" for m in messages
            )
            return turns + ("<|im_start|>assistant\n" if add_generation_prompt else "")

    return render


def chatml_template_on_error(real=tpl.render_template):
    def render_template(source, context, limits=template_sandbox.DEFAULT_LIMITS):
        try:
            return real(source, context, limits)
        except tpl.TemplateRefusal:
            return real(tpl.CHATML, {"add_generation_prompt": False, **context}, limits)

    return render_template


MODEL = "qwen3-vocab"
REJECTED = "27_rejected_missing_content/gen"


def test_chatml_fallback_is_caught_by_the_render_gate(specgate, monkeypatch):
    model = model_ref(MODEL)
    recorded = specgate.snapshot_cases(model, "render")[REJECTED]
    run_gate(
        gate.test_render, OracleEngine(), model, MODEL, REJECTED, recorded
    )  # the oracle refuses, as transformers
    monkeypatch.setattr(tpl.ChatTemplate, "render", chatml_on_error())
    with pytest.raises(
        pytest.fail.Exception, match=rf"stage render, model {MODEL}, case {REJECTED}: the reference refuses"
    ):
        run_gate(gate.test_render, OracleEngine(), model, MODEL, REJECTED, recorded)


def test_chatml_fallback_is_caught_by_the_construct_gate(specgate, monkeypatch):
    case = "51_raise_exception_message"
    recorded = specgate.snapshot_cases(constructs_model(), "render_template")[case]
    run_gate(gate.test_render_template, OracleEngine(), case, recorded)
    monkeypatch.setattr(tpl, "render_template", chatml_template_on_error())
    with pytest.raises(pytest.fail.Exception, match=rf"case {case} .*the reference refuses"):
        run_gate(gate.test_render_template, OracleEngine(), case, recorded)


@pytest.mark.parametrize("dropped", ["construct", "line"])
def test_refusal_message_without_construct_or_line_is_caught(monkeypatch, dropped):
    source, construct, line = checks.REFUSALS["unknown filter"]
    assert checks.refusal_problem(source, construct, line) is None

    def message(refusal):
        what = "" if dropped == "construct" else f"{refusal.construct}: "
        where = "" if dropped == "line" else f" (template line {refusal.line})"
        return (
            f"chat template refused — {what}{refusal.detail if dropped == 'line' else 'cannot render'}{where}"
        )

    monkeypatch.setattr(tpl, "refusal_message", message)
    tpl._compiled.clear()  # compile failures are not cached, but start clean
    problem = checks.refusal_problem(source, construct, line)
    assert problem is not None and f"lacks the {dropped}" in problem, problem
