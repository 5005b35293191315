"""The forward stage's inputs: ``corpus/prompts/prompts.jsonl`` (id, kind — ``chat``
rendered in ChatML or ``raw`` text —, whether the tiny models use it, text), which
models the stage covers, and how much of the reference logits a snapshot keeps."""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
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


_kept_logits: dict[tuple[str, str, tuple[int, ...]], Path] = {}


@cache
def _logits_dir() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="specgate-reference-logits-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def reference_logits(reference: Any, model: Any, ids: list[int], keep: bool = False) -> Any:
    """A live reference's full logits for ``(model, ids)``, computed once per session.

    ``tests/oracle/test_forward.py`` (full-vocabulary comparison, ``keep=True``) and
    ``tests/references/test_logits.py`` (which runs after it) need the same
    transformers outputs for 16 (model, prompt) pairs only as data. Kept ones are on
    disk, not in memory (a 512-token prompt of the 0.5B is 311 MB), and read back
    memory-mapped."""
    key = (reference.name, str(model.gguf), tuple(ids))
    if key in _kept_logits:
        return np.load(_kept_logits[key], mmap_mode="r")
    logits = np.asarray(reference.logits(model, ids))
    if keep:
        path = _logits_dir() / f"{len(_kept_logits)}.npy"
        np.save(path, logits)
        _kept_logits[key] = path
    return logits
