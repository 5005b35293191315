"""The oracle as an engine: specgate's own reference implementation behind the protocol.

It is what ``nox -s parity`` gates by default, and what other engines are compared
with in development. It is *not* a reference for snapshots: snapshots come only
from independent references (transformers, llama.cpp, tiktoken, CPython regex).
"""

from __future__ import annotations

import itertools
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from impl.append_memo import AppendMemo
from impl.envvars import weights_store_dir
from impl.loaded import PerModel
from impl.protocol import Engine, Messages, ModelRef
from oracle import gguf

# A parsed 150k-token vocabulary is ~0.1 GB and its tokenizer ~0.05-0.15 GB; the gates walk
# the models one after another (all stages of one model, then the next), so four of each keep
# every model loaded once per run.
_ggufs = PerModel(limit=4)  # parsed headers and vocabularies (tensors stay memory-mapped)
_tokenizers = PerModel(limit=4)  # each keeps its piece cache while it is cached
_chat_templates = PerModel(limit=32)
# Forward weights are cached in float32 (2 GiB budget each, ~2 GB for the 0.5B): one alive. Its
# kept matrices are mapped from the weights store (``impl.envvars.weights_store_dir``), dequantized
# once per machine.
_forward_models = PerModel(limit=1)
# The appends each loaded forward model computed for sessions (``_SessionModel``): the memo dies
# with the weights it was computed on.
_append_memos: weakref.WeakKeyDictionary[Any, AppendMemo] = weakref.WeakKeyDictionary()
# Every point of the last traced prompts (``_trace_all``): a trace walk asks one prompt several
# times for other points and positions, and each is read here instead of a new forward pass.
_traced = PerModel(limit=2)
# The logits after each token sequence the decode loop asked for (``_Remembering``), newest last.
_decoded: OrderedDict[tuple[Path, tuple[int, ...]], np.ndarray] = OrderedDict()
#: How many such rows are kept: 78 MB of a 151,936-token vocabulary, the streams of four
#: 32-token generations.
DECODED_ROWS = 128
#: The longest prompt whose every point is kept (its result_output is [T, n_vocab]: 39 MB
#: at 64 tokens of a 151,936-token vocabulary); a longer one is traced per request.
TRACE_ALL_TOKENS = 64


def _gguf(path: Path) -> gguf.GGUFFile:
    return _ggufs.get(path, lambda: gguf.open_gguf(path))


def _load_tokenizer(path: Path) -> Any:
    from oracle.tokenizer import Tokenizer

    return Tokenizer.from_gguf(_gguf(path))


def load_forward_model(path: Path) -> Any:
    """A new forward ``Model`` of the GGUF (its own KV cache), its kept matrices mapped from
    the weights store (``impl.envvars.weights_store_dir``): dequantized once per machine."""
    from oracle.forward import Model
    from oracle.weights_store import WeightsStore

    folder = weights_store_dir()
    return Model.from_gguf(_gguf(path), store=None if folder is None else WeightsStore(folder))


def release_forward() -> int:
    """Drop the loaded forward ``Model`` (its float32 weights) and the kept trace points;
    the next call loads it again. Returns the bytes of weights dropped."""
    dropped = sum(model.weights.cached_bytes for model in _forward_models.loaded_values())
    _forward_models.clear()
    _traced.clear()
    _decoded.clear()
    return dropped


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


def check_positions(positions: Sequence[int], n_ids: int) -> list[int]:
    """``positions`` as a list of increasing indices into ``n_ids`` ids, or ``ValueError``
    naming what is wrong (PROTOCOL.md 4.3)."""
    out = [int(p) for p in positions]
    if any(not 0 <= p < n_ids for p in out) or any(a >= b for a, b in itertools.pairwise(out)):
        raise ValueError(f"positions must be increasing indices into the {n_ids} ids, got {out[:10]}")
    return out


class _Remembering:
    """The forward pass as the decode loop reads it (``prefill``: the prompt's last
    logits; ``step``), remembering the logits after each token sequence: a case whose
    prompt and tokens repeat an earlier case's (the same prompt, greedy, with another stop
    string or fewer tokens) reads them instead of running the model. A sequence not seen
    before is computed as it would be without the memory — the model is brought to it by
    the same prefill of the prompt and the same steps — so an answer never depends on
    which cases ran before it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seq: list[int] = []
        self.n_prompt = 0
        self.computed = -1  # how many tokens of ``seq`` the model's KV cache holds (-1: unrelated)

    def prefill(self, ids: Sequence[int]) -> np.ndarray:
        self.seq, self.n_prompt, self.computed = list(ids), len(ids), -1
        return self._logits()[None]

    def step(self, token: int) -> np.ndarray:
        self.seq.append(int(token))
        return self._logits()

    def _logits(self) -> np.ndarray:
        key = (self.path, tuple(self.seq))
        if key in _decoded:
            _decoded.move_to_end(key)
            return np.array(_decoded[key])
        forward = _forward_models.get(self.path, lambda: load_forward_model(self.path))
        if self.computed == len(self.seq) - 1 and self.computed >= self.n_prompt:
            rows = [(len(self.seq), forward.step(self.seq[-1]))]
        else:  # the prompt's prefill, then a step per token already chosen
            forward.reset()
            rows = [(self.n_prompt, forward.prefill(self.seq[: self.n_prompt], outputs=[-1])[0])]
            rows += [(n + 1, forward.step(self.seq[n])) for n in range(self.n_prompt, len(self.seq))]
        self.computed = len(self.seq)
        for n, row in rows:
            _decoded[(self.path, tuple(self.seq[:n]))] = row
        while len(_decoded) > DECODED_ROWS:
            _decoded.popitem(last=False)
        return np.array(rows[-1][1])


def _forward_model(path: Path) -> Any:
    """The GGUF's one forward ``Model``, its KV cache emptied for a new sequence."""
    forward = _forward_models.get(path, lambda: load_forward_model(path))
    forward.reset()
    return forward


def loaded_forward_model(path: Path) -> Any:
    """The oracle's one loaded forward ``Model`` of this GGUF, shared: a judge running the
    oracle's forward in this process (the diagnosis' deviated forwards read its float32
    weights) and the oracle engine (the shrinking's and ``specgate repro``'s reference)
    hold one copy of the weights, ~2 GB on the 0.5B, not one each (issue 38)."""
    return _forward_model(path)


class _SessionModel:
    """The model a session (``oracle.session.Session``) drives: the GGUF's one shared
    forward ``Model`` for its weights, with the session's own KV cache put in place for
    each call and taken out after it — so no other request (logits, trace, generate,
    another session) reads or resets it, and dropping the weights (``release_forward``)
    keeps it."""

    def __init__(self, path: Path) -> None:
        from oracle.kv_cache import KVCache

        self.path = path
        hp, n_ctx = self._shared().hparams, self._shared().n_ctx
        self.cache = KVCache(hp.n_layer, hp.n_head_kv, hp.head_dim, n_ctx)

    def _shared(self) -> Any:
        return _forward_models.get(self.path, lambda: load_forward_model(self.path))

    def prefill(self, ids: Sequence[int], outputs: Sequence[int] | None = None) -> np.ndarray:
        """``ids`` appended to the session's cache; an append this model computed before on
        a cache of the same contents is read from its memo (``impl.append_memo``)."""
        forward, cache = self._shared(), self.cache

        def compute() -> np.ndarray:
            own, forward.cache = forward.cache, cache
            try:
                return forward.prefill(ids, outputs=outputs)
            finally:
                forward.cache = own

        memo = _append_memos.get(forward)
        if memo is None:
            memo = _append_memos[forward] = AppendMemo()
        return memo.append(cache, ids, outputs, compute)

    def truncate(self, n: int) -> None:
        self.cache.truncate(n)

    def reset(self) -> None:
        self.cache.reset()


#: The most sessions one oracle engine keeps open (a KV cache each: ~12 kB a token on the
#: 0.5B model); opening one more is an error naming the bound, not an eviction.
MAX_SESSIONS = 64


class OracleEngine(Engine):
    name = "oracle"
    classes = frozenset({"exact", "quantized"})  # float32 on the dequantized weights

    def __init__(self) -> None:
        self._sessions: dict[str, Any] = {}  # id -> oracle.session.Session
        self._conversations: dict[str, Any] = {}  # id -> oracle.conversation.Conversation (over a session)
        self._opened = 0

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
    def logits(self, model: ModelRef, ids: Sequence[int], positions: Sequence[int] | None = None) -> Any:
        """Float32 logits for every position of ``ids`` (those of ``positions`` only: the
        output projection of the other rows is skipped), from an empty KV cache."""
        rows = None if positions is None else check_positions(positions, len(ids))
        return _forward_model(model.gguf).prefill(ids, outputs=rows)

    def batch_logits(self, model: ModelRef, prompts: Sequence[Sequence[int]]) -> Any:
        """Each prompt's last-position logits, each from an empty KV cache: the definition
        a batch is held to (the oracle evaluates them one after another)."""
        return np.stack([_forward_model(model.gguf).prefill(list(ids), outputs=[-1])[0] for ids in prompts])

    # --- trace stage (the forward's named intermediates) ------------------------------
    def trace(
        self,
        model: ModelRef,
        ids: Sequence[int],
        points: Sequence[str],
        positions: Sequence[int] | None = None,
    ) -> dict[str, Any]:
        """The asked points of one forward pass over ``ids`` from an empty KV cache (a
        short prompt's every point is kept: the next request for it reads them)."""
        from oracle.trace import Recorder, all_points

        forward = _forward_model(model.gguf)
        check_points(points, forward.hparams.n_layer)
        if len(ids) <= TRACE_ALL_TOKENS:

            def trace_all() -> dict[str, Any]:
                recorder = Recorder(all_points(forward.hparams.n_layer))
                forward.prefill(ids, trace=recorder)
                return recorder.values

            values = _traced.get((model.gguf, tuple(ids)), trace_all)
        else:
            recorder = Recorder(points)
            forward.prefill(ids, trace=recorder)
            values = recorder.values
        rows = slice(None) if positions is None else list(positions)
        return {point: np.array(values[point][rows]) for point in points}

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

        tokenizer = self._tokenizer(model)
        special = dispatch(_gguf(model.gguf)).special
        return decode_loop.generate(
            _Remembering(model.gguf),
            lambda token: tokenizer.decode_bytes([token]),
            ids,
            params,
            stop_tokens=[special.eos, special.im_end],
        )

    # --- sessions (the state stages) ---------------------------------------------------
    def session_open(self, model: ModelRef) -> str:
        """A new session over ``model``: an empty KV cache of its own (``_SessionModel``)."""
        from oracle.session import Session

        if len(self._sessions) >= MAX_SESSIONS:
            raise ValueError(f"{len(self._sessions)} sessions are open, the most the oracle keeps: close one")
        self._opened += 1
        sid = f"s{self._opened}"
        self._sessions[sid] = Session(_SessionModel(model.gguf))  # type: ignore[arg-type]
        return sid

    def _session(self, session: str) -> Any:
        try:
            return self._sessions[session]
        except KeyError:
            raise ValueError(f"no open session {session!r}") from None

    def session_append(self, session: str, ids: Sequence[int]) -> dict[str, Any]:
        n_past, logits = self._session(session).append(ids)
        return {"n_past": n_past, "logits": logits}

    def session_generate(self, session: str, params: dict[str, Any]) -> dict[str, Any]:
        """The decode loop from the session's last position (``oracle.session.Session.generate``):
        the emitted ids join the session; stop tokens as ``generate``'s."""
        from oracle.dispatch import dispatch

        held = self._session(session)
        gguf = held.model.path
        tokenizer = _tokenizers.get(gguf, lambda: _load_tokenizer(gguf))
        special = dispatch(_gguf(gguf)).special
        generated = held.generate(
            lambda token: tokenizer.decode_bytes([token]), params, [special.eos, special.im_end]
        )
        return {"n_past": len(held), "generated": generated}

    def session_truncate(self, session: str, n: int) -> int:
        return self._session(session).truncate(n)

    def session_close(self, session: str) -> None:
        self._session(session)
        del self._sessions[session]

    # --- conversations (the state_chat stage) --------------------------------------------
    def conversation_open(self, model: ModelRef, kwargs: dict[str, Any] | None = None) -> str:
        """A new conversation over ``model`` (``oracle.conversation.Conversation``, not a dry
        run): its own session, the model's template and tokenizer (special tokens parsed)."""
        from oracle.conversation import Conversation
        from oracle.session import Session

        if len(self._sessions) + len(self._conversations) >= MAX_SESSIONS:
            raise ValueError(
                f"{len(self._sessions) + len(self._conversations)} sessions and conversations are open, the "
                f"most the oracle keeps: close one"
            )
        tokenizer = self._tokenizer(model)
        self._opened += 1
        cid = f"c{self._opened}"
        self._conversations[cid] = Conversation(
            Session(_SessionModel(model.gguf)),  # type: ignore[arg-type]
            self._chat_template(model),
            lambda text: tokenizer.encode(text, True),
            **(kwargs or {}),
        )
        return cid

    def _conversation(self, conversation: str) -> Any:
        try:
            return self._conversations[conversation]
        except KeyError:
            raise ValueError(f"no open conversation {conversation!r}") from None

    def _turn(
        self, conversation: Any, messages: Messages, system: str | None, kwargs: dict[str, Any]
    ) -> None:
        """The turn played on the conversation's session: the right way (``Conversation.turn``:
        the whole render tokenized, the cache synced to it)."""
        conversation.turn(messages, system, **kwargs)

    def conversation_turn(
        self,
        conversation: str,
        messages: Messages,
        system: str | None = None,
        kwargs: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """``messages`` appended (``system``, ``kwargs`` as ``Conversation.turn``'s), the cache
        brought to the whole render: the ids it holds and its last logits."""
        held = self._conversation(conversation)
        self._turn(held, messages, system, dict(kwargs or {}))
        return {"ids": list(held.session.ids), "logits": held.session.last_logits()}

    def conversation_close(self, conversation: str) -> None:
        self._conversation(conversation)
        del self._conversations[conversation]
