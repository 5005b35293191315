"""The oracle as an engine: specgate's own reference implementation behind the protocol.

It is what ``nox -s parity`` gates by default, and what other engines are compared
with in development. It is *not* a reference for snapshots: snapshots come only
from independent references (transformers, llama.cpp, tiktoken, CPython regex).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar

from impl.protocol import Engine, ModelRef
from oracle import gguf


@lru_cache(maxsize=8)
def _gguf(path: Path) -> gguf.GGUFFile:
    return gguf.open_gguf(path)


_tokenizers: dict[Path, Any] = {}
_chat_templates: dict[Path, Any] = {}


def _memo_tokenizer(path: Path, build: Any) -> Any:
    """One oracle tokenizer per GGUF for the session (its piece cache is shared)."""
    if path not in _tokenizers:
        _tokenizers[path] = build(path)
    return _tokenizers[path]


@lru_cache(maxsize=2)
def _generator(path: Path) -> tuple[Any, Any]:
    """The oracle's forward model and tokenizer for a GGUF (loaded once)."""
    from oracle.forward import Model
    from oracle.tokenizer import Tokenizer

    return Model.from_gguf(_gguf(path)), Tokenizer.from_gguf(_gguf(path))


class OracleEngine(Engine):
    name = "oracle"
    classes = frozenset({"exact", "quantized"})  # float32 on the dequantized weights

    def version(self) -> str:
        from specgate import __version__

        return __version__

    # --- metadata stage -------------------------------------------------------
    def metadata(self, model: ModelRef) -> dict[str, Any]:
        from oracle.dispatch import dispatch

        return dispatch(_gguf(model.gguf)).as_dict()

    # --- tokenizer stage (split / encode / decode) ------------------------------
    def _tokenizer(self, model: ModelRef) -> Any:
        from oracle.tokenizer import Tokenizer

        return _memo_tokenizer(model.gguf, Tokenizer.from_gguf)

    def split(self, model: ModelRef, text: str) -> list[str]:
        return self._tokenizer(model).split(text)

    def encode(self, model: ModelRef, text: str, parse_special: bool) -> list[int]:
        return self._tokenizer(model).encode(text, parse_special)

    def decode(self, model: ModelRef, ids: Sequence[int]) -> bytes:
        return self._tokenizer(model).decode_bytes(ids)

    # --- render stage -----------------------------------------------------------
    def _chat_template(self, model: ModelRef) -> Any:
        from oracle.template import chat_template_for

        if model.gguf not in _chat_templates:  # loading validates it: a refusal is raised, not cached
            _chat_templates[model.gguf] = chat_template_for(_gguf(model.gguf), model.tokenizer_config)
        return _chat_templates[model.gguf]

    def render(
        self,
        model: ModelRef,
        messages: Sequence[dict[str, Any]],
        add_generation_prompt: bool = True,
        **kwargs: Any,
    ) -> str:
        from impl.protocol import Unsupported
        from oracle.template import TemplateRefusal

        try:
            return self._chat_template(model).render(messages, add_generation_prompt, **kwargs)
        except TemplateRefusal as exc:
            raise Unsupported(str(exc)) from exc

    def render_template(self, template: str, context: dict[str, Any]) -> str:
        from impl.protocol import Unsupported
        from oracle.template import TemplateRefusal, render_template

        try:
            return render_template(template, context)
        except TemplateRefusal as exc:
            raise Unsupported(str(exc)) from exc

    # --- forward stage (logits) ---------------------------------------------------
    _forward_models: ClassVar[dict[Path, Any]] = {}

    def logits(self, model: ModelRef, ids: Sequence[int]) -> Any:
        """Float32 logits for every position of ``ids``, from an empty KV cache."""
        from oracle.forward import Model

        models = self._forward_models
        if model.gguf not in models:
            while len(models) >= 2:  # weights are cached in float32: keep few models alive
                models.pop(next(iter(models)))
            models[model.gguf] = Model.from_gguf(_gguf(model.gguf))
        forward = models[model.gguf]
        forward.reset()
        return forward.prefill(ids)

    # --- sampler stage (sample / generate) ------------------------------------------
    def sample(self, logits: Any, params: dict[str, Any], r: float) -> dict[str, Any]:
        from oracle.sampler import sample

        return sample(logits, params, r)

    def generate(self, model: ModelRef, ids: Sequence[int], params: dict[str, Any]) -> dict[str, Any]:
        """The decode loop over the oracle's forward pass; stop tokens are eos and
        ``<|im_end|>`` (which dispatch falls back to eos when the vocab lacks it)."""
        from oracle import decode_loop
        from oracle.dispatch import dispatch

        forward, tokenizer = _generator(model.gguf)
        forward.reset()
        special = dispatch(_gguf(model.gguf)).special
        return decode_loop.generate(
            forward,
            lambda token: tokenizer.decode_bytes([token]),
            ids,
            params,
            stop_tokens=[special.eos, special.im_end],
        )
