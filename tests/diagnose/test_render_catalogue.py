"""The render catalogue's ground: with no knob the deviated renderer is the reference
(every recorded case of the corpus, rendered by transformers, is reproduced), and every
hypothesis shows on some case of the corpus — one the corpus cannot tell from correct
behaviour must not be in the catalogue."""

from __future__ import annotations

import pytest

from specgate.diagnose import render
from specgate.supply import models
from specgate.upkeep import corpus, snapshots

pytestmark = pytest.mark.slow  # ~5 s of CPU, 20 s and more on the loaded machine


def _cases() -> list[tuple[render.ModelTemplate, dict, str | None]]:
    out = []
    for model in (
        corpus.constructs_model(),
        *map(models.model_ref, ("qwen3-vocab", "qwen2.5-coder-0.5b-instruct")),
    ):
        constructs = model.id == corpus.CONSTRUCTS_MODEL_ID
        m = render.reference(model)
        snapshot = snapshots.load(model, "render_template" if constructs else "render")
        keys = ("template", "context") if constructs else ("messages", "add_generation_prompt", "kwargs")
        for case in snapshot.values():
            if isinstance(case, dict) and keys[0] in case:
                out.append((m, {k: case[k] for k in keys}, case.get("output" if constructs else "prompt")))
    return out


def test_without_knobs_the_deviated_renderer_reproduces_the_recorded_references() -> None:
    cases = _cases()
    rendered = [(inp, expected) for _, inp, expected in cases if expected is not None]
    assert len(rendered) > 80
    for m, inp, expected in cases:
        got = render.answer("render", m, inp, {})
        if expected is None:  # transformers refused this one
            assert got == render.REFUSED, inp
        else:
            assert got == expected, inp


def test_every_hypothesis_shows_on_some_case_of_the_corpus() -> None:
    cases = _cases()
    for h in render.CATALOGUE:
        knobs = dict(h.knobs)
        shows = [
            inp
            for m, inp, _ in cases
            if render.applies("render", m, inp, knobs)
            and render.answer("render", m, inp, knobs) != render.answer("render", m, inp, {})
        ]
        assert shows, f"{h.name}: the corpus cannot tell it from correct rendering"
