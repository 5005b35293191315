"""Record the dispatch references: transformers' GGUF config conversion and llama.cpp's
reported model parameters, field by field, on every cached model."""

from __future__ import annotations

from typing import Any

import pytest

from specgate.supply.models import has_weights
from specgate.upkeep import snapshots

pytestmark = pytest.mark.live


def flatten(meta: dict[str, Any]) -> dict[str, Any]:
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


def hparams_of_its_own(model_id: str) -> bool:
    """Every model but the tiny ones in other types than f32 (the same hyper-parameters as
    their family's f32 model, which is recorded)."""
    return not model_id.startswith("tiny-") or model_id.endswith("-f32")


@pytest.mark.applies_to.with_args(hparams_of_its_own)
def test_record_metadata(request, reference, model_id, model):
    hf, llama = reference("hf"), reference("llamacpp")
    sources = {"llamacpp": flatten(llama.metadata(model))}
    if model.extra.get("hparams", has_weights(model)):
        sources["transformers"] = flatten(hf.metadata(model))
    snapshots.record(
        request,
        llama,
        model,
        "metadata",
        merge(sources),
        references={
            "transformers": "load_gguf_checkpoint config",
            "llamacpp": "llama_model_n_* / llama_vocab_*",
        },
        packages=("transformers", "llama-cpp-python", "gguf"),
    )
