"""The metadata / dispatch stage: one case per field of the engine's reading of a model
(``specgate.checks.metadata``). Not replayed on new inputs: its input is the model.
Its cases are built (``metadata_cases``) from each reference's reading, flattened to
``<group>.<key>`` fields: the agreed value, or a recorded disagreement."""

from __future__ import annotations

from typing import Any

from specgate.stages.base import Stage


def flatten(meta: dict[str, Any]) -> dict[str, Any]:
    """A reference's metadata as fields: ``architecture``, ``hparams.<key>``,
    ``special.<key>``; a field whose value is None is left out."""
    out = {"architecture": meta.get("architecture")}
    for group in ("hparams", "special"):
        for key, value in (meta.get(group) or {}).items():
            out[f"{group}.{key}"] = value
    return {k: v for k, v in out.items() if v is not None}


def merge(sources: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One case per field: the agreed value, or a recorded reference disagreement."""
    cases: dict[str, Any] = {}
    for field in sorted({f for values in sources.values() for f in values}):
        said = {name: values[field] for name, values in sources.items() if field in values}
        distinct = {repr(v) for v in said.values()}
        case: dict[str, Any] = {"value": next(iter(said.values())), "sources": said}
        if len(distinct) > 1:
            case["disagreement"] = f"references disagree on {field}: " + ", ".join(
                f"{n}={v!r}" for n, v in said.items()
            )
        cases[field] = case
    return cases


def metadata_cases(readings: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The metadata cases from each reference's ``metadata`` answer (name -> answer;
    the first named gives the value where they disagree)."""
    return merge({name: flatten(meta) for name, meta in readings.items()})


METADATA = Stage("metadata", capability="metadata", snapshot="metadata", build=metadata_cases)
