"""Render gate: the engine's ``render`` against transformers, byte for byte.

Stage ``render`` covers two kinds of case, each snapshot case carrying its inputs:

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

import pytest

from specgate.checks import render as checks
from specgate.outcomes.judge import settle
from specgate.run.case_answers import keep

pytestmark = pytest.mark.gate("render")


def test_render(engine, model, model_id, case_id, case, request):
    got, refusal = checks.answer(
        engine, case, model, case["messages"], case["add_generation_prompt"], **case["kwargs"]
    )
    keep(request, got)
    where = f"stage render, model {model_id}, case {case_id}"
    settle("render", case, lambda c: checks.check(c, got, refusal, "prompt"), where, "prompt")


@pytest.mark.gate("render", snapshot="render_template")
def test_render_template(engine, case_id, case, request):
    got, refusal = checks.answer(engine, case, case["template"], case["context"], method="render_template")
    keep(request, got)
    where = f"stage render, constructs, case {case_id} ({case['construct']}), template {case['template']!r}"
    settle("render", case, lambda c: checks.check(c, got, refusal, "output"), where, "output")
