"""The forward stage's inputs: ``corpus/prompts/prompts.jsonl`` (id, kind — ``chat``
rendered in ChatML or ``raw`` text —, whether the tiny models use it, text), which
models the stage covers, and how much of the reference logits a snapshot keeps."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest

from specgate import models as model_cache
from specgate.plugin import get_model, selected_models

CORPUS = Path(__file__).resolve().parent.parent / "corpus" / "prompts" / "prompts.jsonl"

TOP_K = 64  # reference tokens kept per position
# Positions kept per prompt: every position up to this many, else this many evenly spaced
# (first and last included). ~2.3 kB of JSON per position (two references × 64 ids and
# log-probs); the real model keeps up to 32 (~0.7 MB), each of the 27 tiny models up to 8
# of its 5 prompts (~80 kB).
POSITIONS = {"real": 32, "tiny": 8}


@cache
def prompts() -> dict[str, dict[str, object]]:
    out = {}
    for line in CORPUS.read_text(encoding="utf-8").split("\n"):
        if line.strip():
            case = json.loads(line)
            out[case["id"]] = case
    return out


def is_tiny(model_id: str) -> bool:
    return model_id.startswith("tiny-")


def prompts_for(model_id: str) -> dict[str, dict[str, object]]:
    """All prompts for a real model; the ``tiny`` subset (1 to 512 tokens) for tiny ones."""
    return {k: p for k, p in prompts().items() if p["tiny"] or not is_tiny(model_id)}


def forward_models(config: pytest.Config) -> list[str]:
    """Models with weights: the --model selection (a user's GGUF when it holds tensors),
    else every cached one plus the tiny ones."""
    manifest = model_cache.load_manifest()
    return [m for m in selected_models(config) if has_weights(m, manifest)]


def has_weights(model_id: str, manifest: dict[str, model_cache.ModelEntry]) -> bool:
    """A manifest model by its role; a tiny model always; a user's GGUF when its file holds tensors."""
    if model_id in manifest:
        return manifest[model_id].role == "full-weights"
    try:
        return model_cache.has_weights(get_model(model_id))
    except model_cache.ModelError:
        return True  # kept: its test reports why it cannot run (model_missing)
