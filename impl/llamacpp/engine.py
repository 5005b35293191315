"""llama.cpp through llama-cpp-python: a reference for metadata, tokenization,
logits, sampling and greedy generation on the very same GGUF.

One ``Llama`` per (model, mode) is kept for the session: vocab-only for the
tokenizer stages (fast), full weights for logits/generation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from impl.envvars import llama_threads
from impl.loaded import PerModel
from impl.protocol import Engine, Messages, ModelRef, has_weights
from impl.sessions import Held, SessionOps

TRACE_CTX = 1024  # one micro-batch up to this many tokens; every position's logits are kept (0.6 GB for 150k)


class LlamaCppEngine(SessionOps, Engine):
    name = "llamacpp"
    is_reference = True
    #: A session is a context of its own (its KV cache and compute buffers: ~0.1 GB on
    #: the 0.5B model, the weights mmapped and shared); closed ones are kept for the next.
    max_sessions = 8

    def __init__(self) -> None:
        super().__init__()
        # Vocab-only contexts (~50 MB each for a 150k vocabulary) for the few models in
        # use; one full-weights context (logits_all keeps n_ctx × n_vocab floats).
        self._vocab_contexts = PerModel(limit=4, close=_close)
        self._full_contexts = PerModel(limit=1, close=_close)
        # A context whose graph evaluation callback records the trace points (one model).
        self._tracing_contexts = PerModel(limit=1, close=_close)
        # Contexts of closed sessions (one model's), reused by the next session over it;
        # never more than were open at once.
        self._idle: dict[str, list[Any]] = {}
        self._stop_ids = PerModel(limit=4)

    def version(self) -> str:
        from importlib.metadata import version

        return f"llama-cpp-python {version('llama-cpp-python')}"

    def close(self) -> None:
        self.close_sessions()
        self._drop_idle(list(self._idle))
        self._vocab_contexts.clear()
        self._full_contexts.clear()
        self._tracing_contexts.clear()

    def llama(self, model: ModelRef, vocab_only: bool) -> Any:
        """A session-shared ``llama_cpp.Llama`` for ``model``; vocab-only models
        (no tensors) can only be opened vocab-only."""
        vocab_only = vocab_only or not has_weights(model)
        contexts = self._vocab_contexts if vocab_only else self._full_contexts
        return contexts.get(str(model.gguf), lambda: _open(model, vocab_only))

    # --- metadata stage -------------------------------------------------------
    def metadata(self, model: ModelRef) -> dict[str, Any]:
        from impl.llamacpp.params import metadata_from_llamacpp

        return metadata_from_llamacpp(self, model)

    # --- tokenizer stage (split / encode / decode) ------------------------------
    def encode(self, model: ModelRef, text: str, parse_special: bool) -> list[int]:
        from impl.llamacpp import tokenizer as llamacpp_tokenizer

        return llamacpp_tokenizer.encode(self.llama(model, vocab_only=True), text, parse_special)

    def decode(self, model: ModelRef, ids: Sequence[int]) -> bytes:
        from impl.llamacpp import tokenizer as llamacpp_tokenizer

        return llamacpp_tokenizer.decode(self.llama(model, vocab_only=True), ids)

    # --- render stage -----------------------------------------------------------
    def render(
        self, model: ModelRef, messages: Messages, add_generation_prompt: bool = True, **kwargs: Any
    ) -> str:
        """``llama_chat_apply_template`` with the model's template (not Jinja: kwargs,
        tools and reasoning fields cannot be expressed and are not passed)."""
        from impl.llamacpp import render as llamacpp_render

        template = llamacpp_render.model_template(self.llama(model, vocab_only=True))
        return llamacpp_render.apply_template(template, messages, add_generation_prompt)

    # --- forward stage (logits) ---------------------------------------------------
    def logits(self, model: ModelRef, ids: Sequence[int], positions: Sequence[int] | None = None) -> Any:
        """llama.cpp's logits for every position of ``ids`` on the same GGUF (the rows of
        ``positions`` only, when given)."""
        from impl.llamacpp import forward as llamacpp_forward

        every = llamacpp_forward.logits(self.llama(model, vocab_only=False), ids)
        return every if positions is None else every[list(positions)]

    def played_logits(self, model: ModelRef, steps: Sequence[tuple[int, Sequence[int]]]) -> list[Any]:
        """llama.cpp's own KV cache played through ``steps`` (``(keep, ids)``: remove the
        positions from ``keep`` on, evaluate): the last position's logits after each
        (``impl.sessions.played``; the state stages' reference, not a protocol op)."""
        from impl.llamacpp import forward as llamacpp_forward
        from impl.sessions import played

        return played(llamacpp_forward.Cached(self.llama(model, vocab_only=False)), steps)

    def release_forward(self, model: ModelRef | None = None) -> None:
        """Close ``model``'s full-weights context (every model's when ``None``): its logits
        buffer holds n_ctx × n_vocab floats. Vocab-only contexts stay."""
        self._drop_idle(list(self._idle) if model is None else [str(model.gguf)])
        if model is None:
            self._full_contexts.clear()
            self._tracing_contexts.clear()
        else:
            self._full_contexts.drop(str(model.gguf))
            self._tracing_contexts.drop(str(model.gguf))

    # --- trace stage ----------------------------------------------------------------
    def trace(self, model: ModelRef, ids: Sequence[int], points: Sequence[str],
              positions: Sequence[int] | None = None) -> dict[str, Any]:  # fmt: skip
        """llama.cpp's own intermediates through its graph evaluation callback (``impl.llamacpp.trace``)."""
        from impl.llamacpp import trace as llamacpp_trace

        def open_tracing() -> Any:
            tap = llamacpp_trace.Tap()
            llm = llamacpp_trace.open_tracing(model.gguf, TRACE_CTX, llama_threads(), tap)
            llm._specgate_tap = tap  # the callback lives as long as the context
            return llm

        llm = self._tracing_contexts.get(str(model.gguf), open_tracing)
        return llamacpp_trace.trace(llm, llm._specgate_tap, ids, points, positions)

    # --- sampler stage (sample / generate) ------------------------------------------
    def sample(self, logits: Any, params: dict[str, Any], r: float) -> dict[str, Any]:
        """llama.cpp's own samplers in the chain's order (no draw: its RNG is its own)."""
        from impl.llamacpp.sampler import run_chain

        return run_chain(logits, params, documented=False)

    def generate(self, model: ModelRef, ids: Sequence[int], params: dict[str, Any]) -> dict[str, Any]:
        """Greedy only: llama.cpp's logits, argmax, its own end-of-generation ids."""
        from impl.llamacpp import generate as llamacpp_generate

        return llamacpp_generate.generate(self.llama(model, vocab_only=False), ids, params)

    # --- sessions (the state stages) -----------------------------------------------------
    def _session_cache(self, model: ModelRef) -> Any:
        """A context of the session's own (``impl.llamacpp.forward.Cached``): a closed
        session's over the same model, emptied, or a new one keeping the last logits only."""
        from impl.llamacpp import forward as llamacpp_forward

        key = str(model.gguf)
        self._drop_idle([other for other in self._idle if other != key])
        idle = self._idle.get(key)
        return llamacpp_forward.Cached(
            idle.pop() if idle else _open(model, vocab_only=False, logits_all=False)
        )

    def _session_closed(self, held: Held) -> None:
        self._idle.setdefault(str(held.model.gguf), []).append(held.session.model.llm)

    def _drop_idle(self, keys: list[str]) -> None:
        """Close the idle session contexts of the models ``keys``."""
        for key in keys:
            for llm in self._idle.pop(key, []):
                llm.close()

    def _decoding(self, model: ModelRef) -> tuple[Any, list[int]]:
        """Each token's bytes, and llama.cpp's end-of-generation ids (``llama_vocab_is_eog``,
        as ``generate`` stops)."""
        import llama_cpp

        def eog() -> list[int]:
            llm = self.llama(model, vocab_only=True)
            vocab = llama_cpp.llama_model_get_vocab(llm.model)
            return [i for i in range(llm.n_vocab()) if llama_cpp.llama_vocab_is_eog(vocab, i)]

        return lambda token: self.decode(model, [token]), self._stop_ids.get(str(model.gguf), eog)


def _open(model: ModelRef, vocab_only: bool, logits_all: bool = True) -> Any:
    """A ``llama_cpp.Llama`` on ``model``'s GGUF: vocab-only (tokenizer, template,
    metadata), or with its weights and every position's logits kept (``logits_all``)
    or only the last's."""
    import llama_cpp

    # No weight repacking into "extra" buffer types: on CPUs advertising AMX where the
    # kernel does not grant tile state, ggml's AMX matmul dies with SIGILL (tilezero).
    # The plain CPU kernels are llama.cpp's reference path.
    lib = llama_cpp.llama_cpp  # the module Llama takes its default params from
    default_params = lib.llama_model_default_params

    def model_params() -> Any:
        params = default_params()
        params.use_extra_bufts = False
        return params

    lib.llama_model_default_params = model_params
    try:
        return llama_cpp.Llama(
            model_path=str(model.gguf),
            vocab_only=vocab_only,
            n_ctx=512 if vocab_only else 4096,
            n_threads=llama_threads(),  # SPECGATE_LLAMA_THREADS, checked when read
            logits_all=logits_all and not vocab_only,
            verbose=False,
        )
    finally:
        lib.llama_model_default_params = default_params


def _close(llm: Any) -> None:
    llm.close()
