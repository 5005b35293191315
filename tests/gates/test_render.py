"""Render gate: the engine's ``render`` against transformers, byte for byte.

Stage ``render`` covers two kinds of case:

* ``<model>/<conversation>/<gen|no-gen>`` — every corpus conversation through the
  model's own chat template (``snapshots/<model>/render.json``). Where transformers
  refuses a conversation (the template raises), the engine must refuse too — with
  a structured refusal, a crash is an error — and a message the template passed to
  ``raise_exception`` must surface in the refusal.
* ``constructs/<construct>`` — construct conformance for engines that re-implement
  Jinja: each small template of ``corpus/templates/constructs`` rendered through the
  engine's ``render_template`` (template string + context) against transformers'
  compiled environment (``snapshots/constructs/render_template.json``). These
  appear in the parity matrix under the pseudo model ``constructs``.

The comparison is ``specgate.checks.render``. Where the reference renders and the
engine refuses, the case is ``refused``.
"""

from __future__ import annotations

import pytest

from impl.protocol import Engine, Unsupported
from specgate import render_corpus
from specgate.checks import render as checks
from specgate.gate import call, fail_if, not_applicable, refused
from specgate.plugin import gate_params, snapshot_cases

pytestmark = pytest.mark.gate("render")


def construct_params() -> list:
    from specgate import snapshots

    if render_corpus.CONSTRUCTS_MODEL_ID not in snapshots.available("render_template"):
        return []
    model = render_corpus.constructs_model()
    return [
        pytest.param(model.id, case_id, id=f"{model.id}/{case_id}")
        for case_id in snapshots.load(model, "render_template")
    ]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if {"model_id", "case_id"} <= set(metafunc.fixturenames):
        if metafunc.function.__name__ == "test_render_template":
            metafunc.parametrize(("model_id", "case_id"), construct_params())
        else:
            metafunc.parametrize(("model_id", "case_id"), gate_params(metafunc.config, "render"))


def render_or_refusal(expected: dict, engine: Engine, *args, method: str | None = None, **kwargs):
    """``(text, "")`` when the engine renders, ``(None, message)`` when it refuses with
    ``Unsupported``. A refusal where the reference renders is the ``refused`` outcome;
    a crash is an ``error`` whatever the reference does (``call`` raises it)."""
    try:
        return call(engine, "render", *args, method=method, refusal_expected=True, **kwargs), ""
    except Unsupported as exc:
        if "error" not in expected:
            refused(f"{engine.name} refuses this render input: {exc}")
        return None, str(exc)


def test_render(engine, model, model_id, case_id):
    expected = snapshot_cases(model, "render")[case_id]
    cases = render_corpus.render_cases()
    assert case_id in cases, (
        f"render {model_id}/{case_id}: case in the snapshot but not in corpus/conversations"
    )
    case = cases[case_id]
    got, refusal = render_or_refusal(
        expected, engine, model, case.messages, case.add_generation_prompt, **case.kwargs
    )
    fail_if(checks.check(expected, got, refusal, "prompt"), f"stage render, model {model_id}, case {case_id}")


def test_render_template(engine, model_id, case_id):
    if type(engine).render_template is Engine.render_template:
        not_applicable(
            f"{engine.name} renders only its models' own templates (no render_template entry point)"
        )
    expected = snapshot_cases(render_corpus.constructs_model(), "render_template")[case_id]
    construct = render_corpus.constructs()[case_id]
    got, refusal = render_or_refusal(
        expected, engine, construct["template"], construct["context"], method="render_template"
    )
    where = f"stage render, constructs, case {case_id} ({construct['construct']}), template {construct['template']!r}"
    fail_if(checks.check(expected, got, refusal, "output"), where)
