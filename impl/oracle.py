"""The oracle as an engine: specgate's own reference implementation behind the protocol.

It is what ``nox -s parity`` gates by default, and what other engines are compared
with in development. It is *not* a reference for snapshots: snapshots come only
from independent references (transformers, llama.cpp, tiktoken, CPython regex).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from impl.loaded import PerModel
from impl.protocol import Engine, Messages, ModelRef
from oracle import gguf

# A parsed 150k-token vocabulary is ~0.1 GB and its tokenizer ~0.05-0.15 GB; the gates walk
# the models one after another, so four of each keep every model loaded once per module.
_ggufs = PerModel(limit=4)  # parsed headers and vocabularies (tensors stay memory-mapped)
_tokenizers = PerModel(limit=4)  # each keeps its piece cache while it is cached
_chat_templates = PerModel(limit=32)
# Forward weights are cached in float32 (2 GiB budget each, ~2 GB for the 0.5B): one alive.
_forward_models = PerModel(limit=1)


def _gguf(path: Path) -> gguf.GGUFFile:
    return _ggufs.get(path, lambda: gguf.open_gguf(path))


def _load_tokenizer(path: Path) -> Any:
    from oracle.tokenizer import Tokenizer

    return Tokenizer.from_gguf(_gguf(path))


def _load_forward_model(path: Path) -> Any:
    from oracle.forward import Model

    return Model.from_gguf(_gguf(path))


def release_forward() -> None:
    """Drop the loaded forward ``Model`` (its float32 weights); the next call loads it again."""
    _forward_models.clear()


def check_points(points: Sequence[str], n_layer: int) -> None:
    """Refuse (``Unsupported``, naming it) a point that is no point of an ``n_layer`` model."""
    from impl.protocol import Unsupported
    from oracle.trace import split_point

    for point in points:
        try:
            _, layer = split_point(point)
        except ValueError as exc:
            raise Unsupported(str(exc)) from None
        if layer is not None and layer >= n_layer:
            raise Unsupported(f"trace point {point!r}: the model has {n_layer} layers")


def _forward_model(path: Path) -> Any:
    """The GGUF's one forward ``Model``, its KV cache emptied for a new sequence."""
    forward = _forward_models.get(path, lambda: _load_forward_model(path))
    forward.reset()
    return forward


class OracleEngine(Engine):
    name = "oracle"
    classes = frozenset({"exact", "quantized"})  # float32 on the dequantized weights

    def version(self) -> str:
        from impl import __version__

        return __version__

    # --- metadata stage -------------------------------------------------------
    def metadata(self, model: ModelRef) -> dict[str, Any]:
        from oracle.dispatch import dispatch

        return dispatch(_gguf(model.gguf)).as_dict()

    # --- tokenizer stage (split / encode / decode) ------------------------------
    def _tokenizer(self, model: ModelRef) -> Any:
        return _tokenizers.get(model.gguf, lambda: _load_tokenizer(model.gguf))

    def split(self, model: ModelRef, text: str) -> list[str]:
        return self._tokenizer(model).split(text)

    def encode(self, model: ModelRef, text: str, parse_special: bool) -> list[int]:
        return self._tokenizer(model).encode(text, parse_special)

    def decode(self, model: ModelRef, ids: Sequence[int]) -> bytes:
        return self._tokenizer(model).decode_bytes(ids)

    # --- render stage -----------------------------------------------------------
    def _chat_template(self, model: ModelRef) -> Any:
        from oracle.template import chat_template_for

        # loading validates the template: a refusal is raised, not cached
        return _chat_templates.get(
            model.gguf, lambda: chat_template_for(_gguf(model.gguf), model.tokenizer_config)
        )

    def render(
        self, model: ModelRef, messages: Messages, add_generation_prompt: bool = True, **kwargs: Any
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
    def logits(self, model: ModelRef, ids: Sequence[int]) -> Any:
        """Float32 logits for every position of ``ids``, from an empty KV cache."""
        return _forward_model(model.gguf).prefill(ids)

    # --- trace stage (the forward's named intermediates) ------------------------------
    def trace(
        self,
        model: ModelRef,
        ids: Sequence[int],
        points: Sequence[str],
        positions: Sequence[int] | None = None,
    ) -> dict[str, Any]:
        """The asked points of one forward pass over ``ids`` from an empty KV cache."""
        from oracle.trace import Recorder

        forward = _forward_model(model.gguf)
        check_points(points, forward.hparams.n_layer)
        recorder = Recorder(points)
        forward.prefill(ids, trace=recorder)
        rows = slice(None) if positions is None else list(positions)
        return {point: recorder.values[point][rows] for point in points}

    # --- sampler stage (sample / generate) ------------------------------------------
    def sample(self, logits: Any, params: dict[str, Any], r: float) -> dict[str, Any]:
        from oracle.sampler import sample

        return sample(logits, params, r)

    def release_forward(self, model: ModelRef | None = None) -> None:
        release_forward()

    def generate(self, model: ModelRef, ids: Sequence[int], params: dict[str, Any]) -> dict[str, Any]:
        """The decode loop over the oracle's forward pass; stop tokens are eos and
        ``<|im_end|>`` (which dispatch falls back to eos when the vocab lacks it)."""
        from oracle import decode_loop
        from oracle.dispatch import dispatch

        forward, tokenizer = _forward_model(model.gguf), self._tokenizer(model)
        special = dispatch(_gguf(model.gguf)).special
        return decode_loop.generate(
            forward,
            lambda token: tokenizer.decode_bytes([token]),
            ids,
            params,
            stop_tokens=[special.eos, special.im_end],
        )
