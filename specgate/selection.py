"""Which models and stages a run gates. With no ``--model``: the ones the committed snapshots define.

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

from pathlib import Path

import pytest

from specgate import models as model_cache
from specgate import tiny_specs


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
