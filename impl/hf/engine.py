"""Hugging Face references: tokenizers, transformers' chat templates, transformers' forward.

Heavy imports (torch, transformers) happen lazily, once per session; a model's
transformers weights are loaded from the same GGUF (dequantized to f32) once and
shared by every test that needs them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from impl.loaded import PerModel
from impl.protocol import Engine, Messages, ModelRef
from impl.sessions import SessionOps


class HFEngine(SessionOps, Engine):
    name = "hf"
    classes = frozenset({"exact", "quantized"})  # float32 on the dequantized weights
    is_reference = True

    def __init__(self) -> None:
        super().__init__()
        # What is loaded per model, for the few models in use: transformers' GGUF
        # tokenizer is ~0.1-0.3 GB for a 150k vocabulary, its float32 weights ~2 GB for
        # the 0.5B (one model's at a time).
        self._loaded: dict[str, PerModel] = {
            "metadata": PerModel(limit=64),
            "gguf_tokenizer": PerModel(limit=4),
            "tokenizer": PerModel(limit=4),
            "chat_tokenizer": PerModel(limit=4),
            "forward": PerModel(limit=1),
        }

    def version(self) -> str:
        from importlib.metadata import version

        return f"transformers {version('transformers')}, tokenizers {version('tokenizers')}"

    def close(self) -> None:
        self.close_sessions()
        for loaded in self._loaded.values():
            loaded.clear()

    def _memo(self, kind: str, model: ModelRef, build: Any) -> Any:
        return self._loaded[kind].get(str(model.gguf), build)

    # --- metadata stage -------------------------------------------------------
    def metadata(self, model: ModelRef) -> dict[str, Any]:
        from impl.hf.config import metadata_from_transformers

        return self._memo("metadata", model, lambda: metadata_from_transformers(model))

    # --- tokenizer stage (split / encode / decode) ------------------------------
    def _gguf_tokenizer(self, model: ModelRef) -> Any:
        """transformers' tokenizer built from the GGUF: loaded (or refused) once per model,
        shared by the tokenizer and render stages."""
        from impl.hf import tokenizer as hf_tokenizer

        loaded = self._memo(
            "gguf_tokenizer", model, lambda: hf_tokenizer.or_refusal(lambda: hf_tokenizer.from_gguf(model))
        )
        return hf_tokenizer.unwrap(loaded)

    def _tokenizer(self, model: ModelRef) -> Any:
        from impl.hf import tokenizer as hf_tokenizer

        loaded = self._memo(
            "tokenizer",
            model,
            lambda: hf_tokenizer.or_refusal(
                lambda: hf_tokenizer.load(model, lambda: self._gguf_tokenizer(model))
            ),
        )
        return hf_tokenizer.unwrap(loaded)

    def encode(self, model: ModelRef, text: str, parse_special: bool) -> list[int]:
        from impl.hf import tokenizer as hf_tokenizer

        return hf_tokenizer.encode(self._tokenizer(model), text, parse_special)

    def decode(self, model: ModelRef, ids: Sequence[int]) -> bytes:
        from impl.hf import tokenizer as hf_tokenizer

        return hf_tokenizer.decode(self._tokenizer(model), ids)

    # --- render stage -----------------------------------------------------------
    def render(
        self, model: ModelRef, messages: Messages, add_generation_prompt: bool = True, **kwargs: Any
    ) -> str:
        from impl.hf import render as hf_render

        tok = self._memo(
            "chat_tokenizer", model, lambda: hf_render.load(model, lambda: self._gguf_tokenizer(model))
        )
        return hf_render.render(tok, messages, add_generation_prompt, **kwargs)

    def render_template(self, template: str, context: dict[str, Any]) -> str:
        from impl.hf import render as hf_render

        return hf_render.render_template(template, context)

    # --- forward stage (logits) ---------------------------------------------------
    def logits(self, model: ModelRef, ids: Sequence[int], positions: Sequence[int] | None = None) -> Any:
        """transformers float32 logits on the GGUF's dequantized weights (model loaded once):
        every position's, or the rows of ``positions``."""
        from impl.hf import forward as hf_forward

        every = hf_forward.logits(self._forward_model(model), ids)
        return every if positions is None else every[list(positions)]

    def played_logits(self, model: ModelRef, steps: Sequence[tuple[int, Sequence[int]]]) -> list[Any]:
        """transformers' own KV cache (``impl.hf.forward.Cached``) played through ``steps``
        (``(keep, ids)``: crop, feed): the last position's logits after each
        (``impl.sessions.played``; the state stages' reference, not a protocol op)."""
        from impl.sessions import played

        return played(self._session_cache(model), steps)

    def trace(self, model: ModelRef, ids: Sequence[int], points: Sequence[str],
              positions: Sequence[int] | None = None) -> dict[str, Any]:  # fmt: skip
        """transformers' intermediates, hooked and named to the trace points (``impl.hf.trace``)."""
        from impl.hf import trace as hf_trace

        return hf_trace.trace(self._forward_model(model), ids, points, positions)

    def _forward_model(self, model: ModelRef) -> Any:
        """transformers' model on the GGUF's f32 weights, built as ``model.loader`` says;
        loaded once per session for the forward and generate stages."""
        from impl.hf import forward as hf_forward

        load = {"transformers": hf_forward.load_transformers_gguf, "dequantized": hf_forward.load_dequantized}
        return self._memo("forward", model, lambda: load[model.loader](model.gguf))

    def release_forward(self, model: ModelRef | None = None) -> None:
        """Drop ``model``'s transformers weights (every model's when ``None``)."""
        if model is None:
            self._loaded["forward"].clear()
        else:
            self._loaded["forward"].drop(str(model.gguf))

    # --- sampler stage (sample / generate) ------------------------------------------
    def generate(self, model: ModelRef, ids: Sequence[int], params: dict[str, Any]) -> dict[str, Any]:
        """Greedy only: transformers ``generate(do_sample=False)`` on the GGUF's f32 weights."""
        from impl.hf import generate as hf_generate

        # the very model the forward stage loads (same memo: one load per session)
        lm = self._forward_model(model)
        return hf_generate.generate(lm, self._tokenizer(model), lambda t: self.decode(model, t), ids, params)

    # --- sessions (the state stages) -----------------------------------------------------
    def _session_cache(self, model: ModelRef) -> Any:
        """An empty ``DynamicCache`` over the forward stage's model (``impl.hf.forward.Cached``)."""
        from impl.hf import forward as hf_forward

        return hf_forward.Cached(lambda: self._forward_model(model))

    def _decoding(self, model: ModelRef) -> tuple[Any, list[int]]:
        """Each token's bytes (``impl.hf.tokenizer.piece``), and the stop ids ``generate`` stops
        at (``impl.hf.generate.stop_ids``)."""
        from impl.hf import generate as hf_generate
        from impl.hf import tokenizer as hf_tokenizer

        tok = self._tokenizer(model)
        stops = hf_generate.stop_ids(self._forward_model(model), tok)
        return lambda token: hf_tokenizer.piece(tok, token), stops
