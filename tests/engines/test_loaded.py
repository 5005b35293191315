"""What the adapters keep loaded per model is bounded (``impl.loaded.PerModel``): a
session walking the 27 tiny models and the real ones must not keep every model's
tokenizer or llama.cpp context alive to the end."""

from __future__ import annotations

import importlib.util
import os

import pytest

from impl.loaded import PerModel
from impl.process.tree_memory import proportional_bytes
from specgate.plugin import model_missing, setup_missing
from specgate.supply import models
from tests.memory_profile import free_unused_memory


def resident_after_freeing() -> int:
    free_unused_memory()
    return proportional_bytes(os.getpid())


def test_the_least_recently_used_value_is_evicted_and_closed():
    closed: list[str] = []
    loaded = PerModel(limit=2, close=closed.append)
    assert loaded.get("a", lambda: "A") == "A"
    assert loaded.get("b", lambda: "B") == "B"
    assert loaded.get("a", lambda: "reloaded") == "A"  # a is now the most recently used
    assert loaded.get("c", lambda: "C") == "C"  # evicts b, the least recently used
    assert closed == ["B"]
    assert loaded.loaded_keys() == ["a", "c"]
    loaded.drop("a")
    loaded.drop("never loaded")
    assert closed == ["B", "A"]
    loaded.clear()
    assert closed == ["B", "A", "C"] and len(loaded) == 0


def test_a_load_that_raises_caches_nothing():
    loaded = PerModel(limit=2)
    calls = []

    def refuse():
        calls.append(1)
        raise ValueError("refused")

    for _ in range(2):
        with pytest.raises(ValueError, match="refused"):
            loaded.get("t", refuse)
    assert len(calls) == 2 and len(loaded) == 0


def test_a_limit_below_one_is_refused():
    with pytest.raises(ValueError, match="at least 1"):
        PerModel(limit=0)


@pytest.mark.slow  # 16 llama.cpp vocabulary contexts made one after another (~11 s)
def test_llamacpp_keeps_a_few_vocab_contexts_not_one_per_model_walked():
    """16 tiny models' vocab-only contexts, one after another: with every context kept the
    process grew by ~0.6 GB (~40 MB per 150k vocabulary); with four kept, ~0.15 GB."""
    if importlib.util.find_spec("llama_cpp") is None:
        setup_missing("llama-cpp-python is not installed", remedy="nox -s tests installs it")
    from impl.llamacpp.engine import LlamaCppEngine

    tiny = models.cached_tiny_models()
    if len(tiny) < 16:
        model_missing(f"{len(tiny)} tiny models cached, 16 needed (run: specgate models tiny)")
    engine = LlamaCppEngine()
    try:
        engine.encode(models.model_ref(tiny[0]), "warm up", parse_special=False)
        before = resident_after_freeing()
        for model_id in tiny[:16]:
            assert engine.encode(models.model_ref(model_id), "hello world", parse_special=False)
        grown = resident_after_freeing() - before
    finally:
        engine.close()
    assert grown < 350e6, f"16 vocab-only contexts grew the process by {grown / 1e6:.0f} MB"
