"""llama.cpp through llama-cpp-python: a reference for metadata, tokenization,
logits, sampling and greedy generation on the very same GGUF.

One ``Llama`` per (model, mode) is kept for the session: vocab-only for the
tokenizer stages (fast), full weights for logits/generation.
"""

from __future__ import annotations

import os
from typing import Any

from impl.protocol import Engine, ModelRef

N_THREADS = int(os.environ.get("SPECGATE_LLAMA_THREADS", "2"))


class LlamaCppEngine(Engine):
    name = "llamacpp"
    is_reference = True

    def __init__(self) -> None:
        self._models: dict[tuple[str, bool], Any] = {}

    def version(self) -> str:
        from importlib.metadata import version

        return f"llama-cpp-python {version('llama-cpp-python')}"

    def close(self) -> None:
        for llm in self._models.values():
            llm.close()
        self._models.clear()

    def llama(self, model: ModelRef, vocab_only: bool) -> Any:
        """A session-shared ``llama_cpp.Llama`` for ``model``; vocab-only models
        (no tensors) can only be opened vocab-only."""
        vocab_only = vocab_only or model.role != "full-weights" and not model.id.startswith("tiny-")
        key = (str(model.gguf), vocab_only)
        if key not in self._models:
            import llama_cpp

            self._models[key] = llama_cpp.Llama(
                model_path=str(model.gguf),
                vocab_only=vocab_only,
                n_ctx=512 if vocab_only else 4096,
                n_threads=N_THREADS,
                logits_all=not vocab_only,
                verbose=False,
            )
        return self._models[key]

    # --- metadata stage -------------------------------------------------------
    def metadata(self, model: ModelRef) -> dict[str, Any]:
        from impl.llamacpp_params import metadata_from_llamacpp

        return metadata_from_llamacpp(self, model)

    # --- tokenizer stage (split / encode / decode) ------------------------------

    # --- render stage -----------------------------------------------------------

    # --- forward stage (logits) ---------------------------------------------------

    # --- sampler stage (sample / generate) ------------------------------------------
