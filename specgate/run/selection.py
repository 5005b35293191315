"""Which models, stages and cases a run gates (``--model(s)``, ``--stages``, ``--shard``,
``--max-cases``). With no ``--model``: the models the committed snapshots define.

A gate's cases come from the snapshots (``snapshots/<model>/<stage>.json``), so the
default selection is every manifest or tiny model that has snapshots there — whatever
the cache holds. A run must never gate a subset because a model was not fetched or
generated on this machine (a fresh machine used to gate 3,819 cases, one where the tiny
models had been made 4,399, and nothing said so). A selected model missing from the
cache is therefore a setup error naming it and the command that provides it
(``missing_line``), not a silent drop. Models cached but without snapshots are selected
too (the reference tests record theirs); they add no gate case.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from impl.protocol import ModelRef
from specgate.run.session import SESSION, SpecgateSession
from specgate.supply import models as model_cache
from specgate.supply import tiny_specs


def snapshot_models(root: Path) -> list[str]:
    """Manifest and tiny model ids with a snapshot under ``root`` (manifest order, then tiny)."""
    present = {p.parent.name for p in root.glob("*/*.json")} if root.is_dir() else set()
    known = [*model_cache.load_manifest(), *tiny_specs.model_ids()]
    return [m for m in known if m in present]


def default_models(root: Path) -> list[str]:
    """The run's models when no ``--model`` is given: those with snapshots under ``root``,
    then any other cached model (manifest, then tiny)."""
    chosen = snapshot_models(root)
    cached = [*model_cache.cached_models(), *model_cache.cached_tiny_models()]
    return chosen + [m for m in cached if m not in chosen]


def split_cached(chosen: list[str]) -> tuple[list[str], list[str]]:
    """``chosen`` as (the ones in the cache or not manifest/tiny ids, the missing manifest/tiny ones)."""
    manifest = model_cache.load_manifest()

    def missing(model_id: str) -> bool:
        if tiny_specs.parse_id(model_id) is not None:
            return not model_cache.tiny_gguf(model_id).exists()
        entry = manifest.get(model_id)
        return entry is not None and not (model_cache.model_dir(model_id) / entry.file).exists()

    gone = [m for m in chosen if missing(m)]
    return [m for m in chosen if m not in gone], gone


def provide_command(missing: list[str]) -> str:
    """The command(s) that put ``missing`` into the cache."""
    real = [m for m in missing if tiny_specs.parse_id(m) is None]
    commands = [f"specgate models fetch {' '.join(real)}"] if real else []
    if len(real) < len(missing):
        commands.append("specgate models tiny")
    return " && ".join(commands)


def missing_line(missing: list[str], root: Path) -> str:
    """One line: which snapshot-defined models are not in the cache, and how to provide them."""
    return (
        f"{len(missing)} model(s) with snapshots under {root} are not in the cache "
        f"{model_cache.cache_dir() / 'models'}: {', '.join(missing)}; the run would gate only a subset "
        "of its cases. "
        f"Provide them with `{provide_command(missing)}` (`nox -s parity` does it), "
        "or choose models with --models"
    )


# -- the run's models -------------------------------------------------------------------------


def selected_models(config: pytest.Config) -> list[str]:
    """The model ids of the run: a user's GGUF path (``--model PATH``) appears as its
    ``ModelRef`` id (the file stem), the id its snapshots are kept under."""
    chosen = list(config.getoption("--model"))  # includes --models (see pytest_configure)
    if not chosen:  # what the snapshots define, cached or not (specgate.run.selection)
        return default_models(config.stash[SESSION].snapshot_root)
    return [user_model_id(config.stash[SESSION], spec) for spec in chosen]


def user_model_id(session: SpecgateSession, spec: str) -> str:
    """``spec`` itself, or the id of the user GGUF it is a path to (an unusable spec is
    left as it is: ``check_usage`` has reported it, or the ``model`` fixture will)."""
    try:
        ref = session.model(spec)
    except model_cache.ModelError:
        return spec
    return ref.id if ref.role == "user" else spec


def forward_models(config: pytest.Config) -> list[str]:
    """Models with weights: the --model selection (a user's GGUF when it holds tensors),
    else the default selection (specgate.run.selection); of those, the ``--reference-models``
    sample when one is given (its ids are checked at start-up: ``usage.check_usage``)."""
    manifest = model_cache.load_manifest()
    model_of = config.stash[SESSION].model
    chosen = [m for m in selected_models(config) if has_weights(m, manifest, model_of)]
    sample = {m.strip() for m in config.getoption("--reference-models").split(",") if m.strip()}
    return [m for m in chosen if m in sample] if sample else chosen


def has_weights(
    model_id: str, manifest: dict[str, model_cache.ModelEntry], model_of: Callable[[str], ModelRef]
) -> bool:
    """A manifest model by its role; a tiny model always; a user's GGUF when its file holds
    tensors (``model_of``: the run's model lookup, ``SpecgateSession.model``)."""
    if model_id in manifest:
        return manifest[model_id].role == "full-weights"
    try:
        return model_cache.has_weights(model_of(model_id))
    except model_cache.ModelError:
        return True  # kept: its test reports why it cannot run (model_missing)


# -- stages ------------------------------------------------------------------------------------


def selected_stages(config: pytest.Config) -> set[str] | None:
    raw = config.getoption("--stages")
    return {s.strip() for s in raw.split(",") if s.strip()} or None


def row_stage(item: pytest.Item) -> str | None:
    """The matrix row's stage of a gate item: its stage, with the conformance class
    for the classed stages; None for a test that is not a gate."""
    marker = item.get_closest_marker("gate")
    if marker is None:
        return None
    params = getattr(item, "callspec", None)
    cls = params.params.get("conformance_class") if params else None
    return f"{marker.args[0]}/{cls}" if cls else marker.args[0]


# -- the cases kept ----------------------------------------------------------------------------


def keep_stages(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``--stages``: deselect the gates of the other stages (other tests are kept)."""
    stages = selected_stages(config)
    if stages is None:
        return
    keep, drop = [], []
    for item in items:
        stage = row_stage(item)
        chosen = stage is None or stage in stages or stage.split("/")[0] in stages
        (keep if chosen else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def keep_shard(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the gate cases other shards run (``specgate.run.shard``); other tests run in shard 1."""
    from specgate.run.shard import ShardError, gate_group, load_costs, split_cases

    shard = config.stash[SESSION].shard
    if shard is None:
        return
    try:
        costs = load_costs()
    except ShardError as exc:
        raise pytest.UsageError(str(exc)) from None

    def case_of(item: pytest.Item) -> tuple[str, str, str] | None:
        stage, model = row_stage(item), model_of(item)
        if stage is None or model is None:
            return None
        return stage, model, str(item.callspec.params.get("case_id", item.nodeid))

    cases = {item: case_of(item) for item in items}
    mine = split_cases([c for c in cases.values() if c is not None], *shard, costs)
    ours = [(gate_group(*cases[i]) in mine) if cases[i] else shard[0] == 1 for i in items]
    if not all(ours):
        config.hook.pytest_deselected(items=[i for i, own in zip(items, ours, strict=True) if not own])
        items[:] = [i for i, own in zip(items, ours, strict=True) if own]


def keep_sample(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``--max-cases N``: of each (stage, model) row's gate cases keep N spread evenly over
    the collection order (first, last and between), so a small sample still reaches
    the kinds of input later in the snapshot. Other tests are kept."""
    limit = config.getoption("--max-cases")
    if limit < 0:
        raise pytest.UsageError(f"--max-cases {limit}: must be 0 (all) or a positive number of cases")
    if not limit:
        return
    rows: dict[tuple[str, str], list[pytest.Item]] = {}
    for item in items:
        stage = row_stage(item)
        if stage is not None and getattr(item, "callspec", None) is not None:
            rows.setdefault((stage, str(model_of(item))), []).append(item)
    drop = set()
    for row in rows.values():
        if len(row) > limit:
            chosen = {round(i * (len(row) - 1) / max(limit - 1, 1)) for i in range(limit)}
            drop.update(item for i, item in enumerate(row) if i not in chosen)
    if drop:
        config.hook.pytest_deselected(items=[i for i in items if i in drop])
        items[:] = [i for i in items if i not in drop]


def group_by_model(items: list[pytest.Item]) -> None:
    """Order the gate cases model by model (in the order the models first appear), each
    model's stages and cases in their collected order; other tests keep their places.
    A model's weights, vocabulary and tokenizer are then loaded once for all its stages,
    not once per stage module (``specgate.gates`` drops them when the model changes)."""
    slots = [i for i, item in enumerate(items) if row_stage(item) is not None]
    first: dict[str | None, int] = {}
    for i in slots:
        first.setdefault(model_of(items[i]), i)
    ordered = sorted((items[i] for i in slots), key=lambda item: first[model_of(item)])  # stable
    for i, item in zip(slots, ordered, strict=True):
        items[i] = item


def model_of(item: pytest.Item) -> str | None:
    """The model id a gate item is parametrized with (None for none)."""
    params = getattr(item, "callspec", None)
    model = params.params.get("model_id") if params is not None else None
    return model if isinstance(model, str) else None
