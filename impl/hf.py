"""Hugging Face references: tokenizers, transformers' chat templates, transformers' forward.

Heavy imports (torch, transformers) happen lazily, once per session; a model's
transformers weights are loaded from the same GGUF (dequantized to f32) once and
shared by every test that needs them.
"""

from __future__ import annotations

from typing import Any

from impl.protocol import Engine, ModelRef


class HFEngine(Engine):
    name = "hf"
    is_reference = True

    def __init__(self) -> None:
        self._cache: dict[tuple[str, str], Any] = {}

    def version(self) -> str:
        from importlib.metadata import version

        return f"transformers {version('transformers')}, tokenizers {version('tokenizers')}"

    def close(self) -> None:
        self._cache.clear()

    def _memo(self, kind: str, model: ModelRef, build: Any) -> Any:
        key = (kind, str(model.gguf))
        if key not in self._cache:
            self._cache[key] = build()
        return self._cache[key]

    # --- metadata stage -------------------------------------------------------
    def metadata(self, model: ModelRef) -> dict[str, Any]:
        from impl.hf_config import metadata_from_transformers

        return self._memo("metadata", model, lambda: metadata_from_transformers(model))

    # --- tokenizer stage (split / encode / decode) ------------------------------

    # --- render stage -----------------------------------------------------------

    # --- forward stage (logits) ---------------------------------------------------

    # --- sampler stage (sample / generate) ------------------------------------------
