"""The render stages: ``render`` (a conversation through the model's own chat template,
or a construct template through ``render_template``) and ``template`` (the rendered
prompt's token ids). One answer rule serves the gate and a replay on a new input:
``specgate.checks.render.answer`` (a refusal where the reference renders is
``refused``; a crash an ``error``) and ``specgate.checks.render.check``. Their cases are built from the references by
``specgate.stages.render_cases``."""

from __future__ import annotations

from typing import Any

from specgate.stages.base import Stage, Verdict
from specgate.stages.render_cases import render_cases, template_cases

#: The construct templates' snapshot (pseudo model ``constructs``), gated as stage ``render``.
CONSTRUCTS_SNAPSHOT = "render_template"


def replay_render(engine: Any, oracle: Any, model: Any, inp: dict[str, Any], _cls: str = "") -> Verdict:
    """A conversation through the model's template (``messages``) or a construct
    template (``template`` + ``context``), as ``specgate/gates/test_render.py`` judges it."""
    from impl.protocol import Unsupported
    from specgate.checks import render

    construct = "template" in inp
    key, method = ("output", "render_template") if construct else ("prompt", "render")
    if construct:
        args: tuple[Any, ...] = (inp["template"], inp["context"])
    else:
        args = (model, inp["messages"], inp["add_generation_prompt"])
    kwargs = {} if construct else inp.get("kwargs", {})
    try:
        expected: dict[str, Any] = {key: getattr(oracle, method)(*args, **kwargs)}
    except Unsupported as exc:  # the oracle cannot tell a raise_exception message from others
        expected = {"error": {"type": "refusal", "message": str(exc), "raised_by_template": False}}
    got, refusal = render.answer(engine, expected, *args, method=method, **kwargs)
    failure = render.check(expected, got, refusal, key, reference="the oracle")
    answer = got if got is not None else {"refusal": refusal}
    return Verdict(
        "fail" if failure else "pass", failure or "", answer, expected.get(key, expected.get("error"))
    )


def render_input(case: dict[str, Any], constructs: bool) -> dict[str, Any]:
    keys = ("template", "context") if constructs else ("messages", "add_generation_prompt", "kwargs")
    return {key: case[key] for key in keys}


RENDER = Stage(
    "render", capability="render", snapshot="render", replay=replay_render, case_input=render_input,
    build=render_cases,
)  # fmt: skip
#: The template identity gate: render, then encode the prompt (both capabilities; n/a without encode).
TEMPLATE = Stage("template", capability="render", snapshot="template", build=template_cases)
