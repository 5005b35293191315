"""The diagnosis tests' shared fixture: the qwen3 vocabulary's oracle tokenizer, which the
localization and one-cause tests plant their engines' answers against."""

from __future__ import annotations

import pytest

from oracle.tokenizer import Tokenizer
from specgate.plugin import model_missing
from specgate.supply import models as model_cache

#: The vocabulary the planted tokenizer answers are made on.
MODEL = "qwen3-vocab"


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    """The oracle's tokenizer of ``MODEL`` (a setup error naming the fetch when it is missing)."""
    if MODEL not in model_cache.cached_models():
        model_missing(f"{MODEL}; run: specgate models fetch {MODEL}")
    return Tokenizer.from_gguf(model_cache.model_ref(MODEL).gguf)
