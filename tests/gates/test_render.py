"""Render gate: the engine's ``render`` against transformers, byte for byte.

Stage ``render`` covers two kinds of case:

* ``<model>/<conversation>/<gen|no-gen>`` — every corpus conversation through the
  model's own chat template (``snapshots/<model>/render.json``). Where transformers
  refuses a conversation (the template raises), the engine must refuse too, and a
  message the template passed to ``raise_exception`` must surface in the refusal.
* ``constructs/<construct>`` — construct conformance for engines that re-implement
  Jinja: each small template of ``corpus/templates/constructs`` rendered through the
  engine's ``render_template`` (template string + context) against transformers'
  compiled environment (``snapshots/constructs/render_template.json``). These
  appear in the parity matrix under the pseudo model ``constructs``.
"""

from __future__ import annotations

import pytest

from impl.protocol import Engine, EngineError, Unsupported
from specgate import render_corpus
from specgate.gate import call, not_applicable, text_diff
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


def refused(
    engine: Engine, capability: str, *args, method: str | None = None, **kwargs
) -> tuple[str | None, str]:
    """``(None, message)`` when the engine refuses; ``(output, "")`` when it renders."""
    try:
        return call(engine, capability, *args, method=method, refusal_expected=True, **kwargs), ""
    except (Unsupported, EngineError) as exc:
        return None, str(exc)


def check(expected: dict, got: str | None, refusal: str, where: str, key: str) -> None:
    if "error" in expected:
        error = expected["error"]
        assert got is None, (
            f"{where}: the reference refuses this input ({error['type']}: {error['message']}) "
            f"but the engine rendered {got[:300]!r}"
        )
        if error["raised_by_template"]:
            assert error["message"] in refusal, (
                f"{where}: the template's own raise_exception message {error['message']!r} does not surface "
                f"in the engine's refusal: {refusal!r}"
            )
        return
    assert got is not None, f"{where}: the engine refused what the reference renders: {refusal}"
    diff = text_diff(expected[key], got)
    assert diff is None, f"{where}: rendered prompt differs from transformers\n{diff}"


def test_render(engine, model, model_id, case_id):
    expected = snapshot_cases(model, "render")[case_id]
    cases = render_corpus.render_cases()
    assert case_id in cases, (
        f"render {model_id}/{case_id}: case in the snapshot but not in corpus/conversations"
    )
    case = cases[case_id]
    got, refusal = refused(engine, "render", model, case.messages, case.add_generation_prompt, **case.kwargs)
    check(expected, got, refusal, f"stage render, model {model_id}, case {case_id}", "prompt")


def test_render_template(engine, model_id, case_id):
    if type(engine).render_template is Engine.render_template:
        not_applicable(
            f"{engine.name} renders only its models' own templates (no render_template entry point)"
        )
    expected = snapshot_cases(render_corpus.constructs_model(), "render_template")[case_id]
    construct = render_corpus.constructs()[case_id]
    got, refusal = refused(
        engine, "render", construct["template"], construct["context"], method="render_template"
    )
    where = f"stage render, constructs, case {case_id} ({construct['construct']}), template {construct['template']!r}"
    check(expected, got, refusal, where, "output")
