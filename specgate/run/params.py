"""The parametrization: a gate runs once per snapshot case of each selected model (and
once per conformance class of a classed stage); other tests once per selected model."""

from __future__ import annotations

from typing import Any

import pytest

from specgate.run import setup_check
from specgate.run.selection import forward_models, selected_models
from specgate.run.session import SESSION
from specgate.stages import CONSTRUCTS_SNAPSHOT, STAGES
from specgate.upkeep import snapshots


def parametrize(metafunc: pytest.Metafunc) -> None:
    """A gate (``gate`` marker, ``case_id`` argument) runs once per snapshot case of each
    selected model (``gate_params``), and once per conformance class in the classed
    stages. Other tests taking ``model_id`` run once per selected model, those taking
    ``forward_model_id`` once per selected model with weights; an ``applies_to(predicate)``
    marker keeps the models its predicate accepts (no parametrization that would only skip)."""
    names = set(metafunc.fixturenames)
    gate = metafunc.definition.get_closest_marker("gate")
    if gate is not None and "case_id" in names:
        if gate.args[0] not in STAGES:  # a misspelt stage would gate nothing, silently: a setup error
            metafunc.config.stash[SESSION].setup_problems.append(
                f"{metafunc.definition.nodeid}: gate marker names an unknown stage {gate.args[0]!r}; "
                f"the stages (specgate.stages): {', '.join(STAGES)}"
            )
            metafunc.parametrize(("model_id", "case_id"), [])
            return
        metafunc.parametrize(("model_id", "case_id"), gate_params(metafunc.config, gate))
        classes = STAGES[gate.args[0]].classes
        if classes:  # the class varies fastest: both classes share one answer
            metafunc.parametrize("conformance_class", classes)
    elif "forward_model_id" in names:  # the logits references: the models with weights
        metafunc.parametrize("forward_model_id", applicable(metafunc, forward_models(metafunc.config)))
    elif (
        "model_id" in names
        and "case_id" not in names
        and not any("model_id" in m.args[0] for m in metafunc.definition.iter_markers("parametrize"))
    ):
        metafunc.parametrize("model_id", applicable(metafunc, selected_models(metafunc.config)))


def applicable(metafunc: pytest.Metafunc, model_ids: list[str]) -> list[str]:
    """The ``model_ids`` every ``applies_to`` marker of the test accepts. A marker's
    predicate takes the model id; with ``models=True`` also the run's model lookup
    (``SpecgateSession.model``: a user's GGUF is known by its id there)."""
    model_of = metafunc.config.stash[SESSION].model
    for marker in metafunc.definition.iter_markers("applies_to"):
        accepts, extra = marker.args[0], (model_of,) if marker.kwargs.get("models") else ()
        model_ids = [m for m in model_ids if accepts(m, *extra)]
    return model_ids


def snapshot_stage(gate: pytest.Mark) -> str:
    """The snapshot a gate reads: its stage's, or the one the marker names
    (``@pytest.mark.gate("render", snapshot="render_template")``)."""
    return gate.kwargs.get("snapshot", gate.args[0])


def gate_params(config: pytest.Config, gate: pytest.Mark) -> list[Any]:
    """``(model_id, case_id)`` params for a gate: every selected model that has the
    gate's snapshot × every case in it (ids read from the snapshot; the marker's
    ``cases`` prefix, when given, picks some). The construct templates' snapshot has
    one pseudo model, gated whatever models are selected."""
    from specgate.upkeep import corpus

    stage, prefix = snapshot_stage(gate), gate.kwargs.get("cases", "")
    session = config.stash[SESSION]
    root, models = session.snapshot_root, selected_models(config)
    if stage == CONSTRUCTS_SNAPSHOT:
        root, models = snapshots.SNAPSHOT_ROOT, [corpus.CONSTRUCTS_MODEL_ID]
    params = []
    for model_id in models:
        if model_id not in snapshots.available(stage, root):
            continue
        for case_id in setup_check.case_ids(session.setup_problems, model_id, stage, root):
            if case_id.startswith(prefix):
                params.append(pytest.param(model_id, case_id, id=f"{model_id}/{case_id}"))
    return params
