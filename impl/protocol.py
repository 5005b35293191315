"""The one small protocol every engine adapter speaks.

An adapter declares which pipeline stages (capabilities) it offers and implements
one method per op; the ops, their capabilities and their arguments are the
protocol's (``impl.ops``, read from ``protocol/``). A stage the adapter does not
offer is reported as ``n/a`` by the gates — never as a pass. References (transformers, llama.cpp,
tiktoken, CPython ``regex``) are adapters too; only adapters with
``is_reference = True`` may write snapshots.

Values crossing this boundary are plain data (str, bytes, int lists, dicts of
JSON-able values, numpy arrays for logits) so that the same calls can travel over
the JSON-lines process protocol (``impl.process.client``) and HTTP (``impl.http.engine``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from impl.ops import CAPABILITIES as CAPABILITIES  # re-exported: the protocol's names
from impl.ops import CONFORMANCE_CLASSES as CONFORMANCE_CLASSES
from impl.ops import OPS
from oracle.trace import KINDS as TRACE_KINDS

LOADERS: tuple[str, ...] = ("transformers", "dequantized")

#: A conversation as ``render`` takes it: messages with ``role``, ``content`` and the
#: template's other fields (``tool_calls``, ``reasoning_content``, ...).
Messages = Sequence[dict[str, Any]]


@dataclass(frozen=True)
class ModelRef:
    """What an adapter is told about a model: where its files are and what they hold.

    ``gguf`` is always set. ``tokenizer_json`` / ``tokenizer_config`` are set when
    the model ships HF tokenizer files; ``tiktoken`` when it ships tiktoken ranks.

    ``weights``: the GGUF holds tensors, so a forward pass can run on it. Left unset
    it is what the role says (a ``full-weights`` model has them, the others not);
    a user's GGUF says it from the file's header.

    ``loader``: how a transformers reference builds the model from those weights —
    ``transformers``, its own GGUF loader (independent tensor naming and config
    mapping; the published models), or ``dequantized``, gguf-py's dequantization
    mapped to transformers' names (the generated tiny models, where transformers'
    loader would spend a minute per file parsing the 150k vocabulary).
    """

    id: str
    gguf: Path
    sha256: str
    role: str = "full-weights"
    tokenizer_json: Path | None = None
    tokenizer_config: Path | None = None
    tiktoken: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    weights: bool | None = None  # None: from the role; a bool once constructed
    loader: str = "transformers"

    def __post_init__(self) -> None:
        if self.weights is None:
            object.__setattr__(self, "weights", self.role == "full-weights")
        if self.loader not in LOADERS:
            raise ValueError(f"model {self.id!r}: loader {self.loader!r} is not one of {', '.join(LOADERS)}")


def answered_positions(n_rows: int | None, n_ids: int, positions: Sequence[int] | None) -> list[int] | None:
    """The position of each row of a ``logits`` answer of ``n_rows`` rows over ``n_ids`` ids:
    ``positions`` when it holds one row per position asked, every position when one per id
    (an engine may ignore ``positions``, PROTOCOL.md 4.3; when every position is asked the
    two are the same); None for any other row count."""
    if positions is not None and n_rows == len(positions):
        return list(positions)
    return list(range(n_ids)) if n_rows == n_ids else None


def has_weights(model: ModelRef) -> bool:
    """Whether ``model``'s GGUF holds weights (a forward pass can run on it)."""
    return bool(model.weights)


class EngineError(Exception):
    """The engine crashed, hung, or answered malformed data: outcome ``error``."""


class EngineDied(EngineError):
    """The engine's process ended during a request or its start-up: it crashed, or was
    killed for hanging or for breaking the protocol. ``stderr`` holds the bounded lines
    of its stderr that carry a message (else its last lines), for one-line reasons."""

    def __init__(self, message: str, stderr: list[str] | None = None) -> None:
        super().__init__(message)
        self.stderr = list(stderr or [])


class Unsupported(Exception):
    """The engine refuses this particular input for a stated reason (not a crash)."""


class Engine:
    """Base class for adapters. Subclasses set ``name`` and override the methods of
    the ops they answer (``impl.ops.OPS``). ``capabilities`` is a set: an adapter
    declares it (a class attribute), a remote adapter's handshake fills it, and
    otherwise it is the capabilities of the ops the class implements (``implemented``,
    computed once per class when it is defined). ``ops`` is what the engine answers.

    Method contracts (all stages are pure functions of their arguments):

    metadata(model) -> dict
        ``{"architecture", "hparams": {...}, "special": {...}, "tokenizer": {...}}`` —
        the keys the dispatch gate compares (see ``oracle.dispatch.Hparams``).
    render(model, messages, add_generation_prompt, **kwargs) -> str
        the model's own chat template rendered to a prompt string.
    render_template(template, context) -> str
        a template string rendered with a context (construct-conformance gate).
    split(model, text) -> list[str]
        pre-tokenizer pieces (no special-token scan).
    encode(model, text, parse_special) -> list[int]
    decode(model, ids) -> bytes
    logits(model, ids, positions=None) -> numpy array [len(positions), n_vocab] of float32
        one forward pass over ``ids`` from an empty cache, the rows of ``positions`` (indices
        into ``ids``, increasing) in that order; every row ``[len(ids), n_vocab]`` without
        ``positions`` — or always: an adapter may ignore them (a method without the
        parameter is called without it, ``impl.ops.Op.invoke``).
    sample(logits, params, r) -> dict  (see ``oracle.sampler``)
    generate(model, ids, params) -> dict  (see ``oracle.decode_loop``)
    trace(model, ids, points, positions) -> dict[str, numpy array]
        the forward's named intermediates (``oracle.trace``) of one pass over ``ids``
        from position 0: per point asked, float32 [len(positions) or len(ids), columns].
    session_open(model) -> str
        a new session (an empty KV cache the engine keeps between requests): its id.
    session_append(session, ids) -> {"n_past": int, "logits": numpy array [n_vocab]}
        ``ids`` evaluated after the session's tokens: the count it now holds and the
        logits at its last position (``oracle.session.Session.append``).
    session_generate(session, params) -> {"n_past": int, "generated": dict}
        the decode loop from the session's last position, ``generate``'s params and
        result; the emitted ids join the session (``oracle.session.Session.generate``).
    session_truncate(session, n) -> int
        keep the first ``n`` tokens, drop the KV of the rest: ``n``.
    session_close(session) -> None
    conversation_open(model, kwargs) -> str
        a new conversation (no messages; the template's extra variables ``kwargs``) over a
        cache the engine manages itself: its id.
    conversation_turn(conversation, messages, system, kwargs) -> {"ids": list[int], "logits": numpy array [n_vocab]}
        ``messages`` appended (the system prompt replaced when ``system`` is a string, the
        template's variables updated by ``kwargs``), the whole conversation rendered with
        the model's own template asking for the answer, the cache brought to hold it: the
        ids it holds and the logits at the last (``oracle.conversation.Conversation.turn``).
    conversation_close(conversation) -> None
    batch_logits(model, prompts) -> numpy array [len(prompts), n_vocab] of float32
        the prompts evaluated together, each from an empty cache: each one's last
        position's logits, in the order asked (an optional capability, ``batch``).

    The session and conversation ops are the one state an engine keeps between requests
    (the ``state_*`` stages gate it); unlike the others they raise ``Unsupported`` when not overridden.
    """

    name: ClassVar[str] = "engine"
    is_reference: ClassVar[bool] = False
    #: The conformance classes of the logits and generate stages this engine claims
    #: (``CONFORMANCE_CLASSES``): ``exact`` — float32 math on the dequantized weights,
    #: held to transformers' f32 forward; ``quantized`` — llama.cpp-class numerics,
    #: held to llama.cpp. A class not claimed is ``n/a``.
    classes: frozenset[str] = frozenset({"quantized"})
    #: The trace point kinds (``oracle.trace.KINDS``) this engine's ``trace`` answers;
    #: a kind left out is skipped by the trace stage's walk, and said so.
    trace_points: frozenset[str] = frozenset(TRACE_KINDS)

    #: The ops whose methods this class overrides: computed once, when the class is defined.
    implemented: ClassVar[frozenset[str]] = frozenset()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.implemented = frozenset(op for op in OPS if getattr(cls, op) is not getattr(Engine, op))

    @property
    def capabilities(self) -> frozenset[str]:
        """The stages offered (see the class docstring): by default those of ``implemented``."""
        return frozenset(OPS[op].capability for op in self.implemented)

    @property
    def ops(self) -> frozenset[str]:
        """The ops this engine answers: those it implements of the stages it offers (``render``
        may come without ``render_template``; a remote engine's handshake says which)."""
        return frozenset(op for op in self.implemented if OPS[op].capability in self.capabilities)

    def version(self) -> str:
        return "unknown"

    def close(self) -> None:
        """Release processes, servers or large weights the adapter holds."""

    def release_forward(self, model: ModelRef | None = None) -> None:
        """Drop the forward weights loaded for ``model`` (every model's when ``None``);
        the next forward call loads them again. A session walking many models needs this."""

    def offers(self, capability: str) -> bool:
        return capability in self.capabilities

    def unsupported_model(self, model: ModelRef) -> str:
        """Why the engine does not support ``model`` at all (its cases are n/a, never
        requested), or "" when it may (the default: every model)."""
        return ""

    # One method per capability; an adapter overrides those it declares.
    def metadata(self, model: ModelRef) -> dict[str, Any]:
        raise NotImplementedError

    def render(
        self, model: ModelRef, messages: Messages, add_generation_prompt: bool = True, **kwargs: Any
    ) -> str:
        raise NotImplementedError

    def render_template(self, template: str, context: dict[str, Any]) -> str:
        raise NotImplementedError

    def split(self, model: ModelRef, text: str) -> list[str]:
        raise NotImplementedError

    def encode(self, model: ModelRef, text: str, parse_special: bool) -> list[int]:
        raise NotImplementedError

    def decode(self, model: ModelRef, ids: Sequence[int]) -> bytes:
        raise NotImplementedError

    def logits(self, model: ModelRef, ids: Sequence[int], positions: Sequence[int] | None = None) -> Any:
        raise NotImplementedError

    def sample(self, logits: Any, params: dict[str, Any], r: float) -> dict[str, Any]:
        raise NotImplementedError

    def generate(self, model: ModelRef, ids: Sequence[int], params: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def trace(
        self,
        model: ModelRef,
        ids: Sequence[int],
        points: Sequence[str],
        positions: Sequence[int] | None = None,
    ) -> dict[str, Any]:
        raise NotImplementedError

    # Sessions: the one state kept between requests (PROTOCOL.md section 4.7).
    def session_open(self, model: ModelRef) -> str:
        raise Unsupported(f"{self.name} does not offer sessions")

    def session_append(self, session: str, ids: Sequence[int]) -> dict[str, Any]:
        raise Unsupported(f"{self.name} does not offer sessions")

    def session_generate(self, session: str, params: dict[str, Any]) -> dict[str, Any]:
        raise Unsupported(f"{self.name} does not offer sessions")

    def session_truncate(self, session: str, n: int) -> int:
        raise Unsupported(f"{self.name} does not offer sessions")

    def session_close(self, session: str) -> None:
        raise Unsupported(f"{self.name} does not offer sessions")

    def conversation_open(self, model: ModelRef, kwargs: dict[str, Any] | None = None) -> str:
        raise Unsupported(f"{self.name} does not offer conversations")

    def conversation_turn(
        self,
        conversation: str,
        messages: Sequence[dict[str, Any]],
        system: str | None = None,
        kwargs: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        raise Unsupported(f"{self.name} does not offer conversations")

    def conversation_close(self, conversation: str) -> None:
        raise Unsupported(f"{self.name} does not offer conversations")

    def batch_logits(self, model: ModelRef, prompts: Sequence[Sequence[int]]) -> Any:
        raise Unsupported(f"{self.name} does not evaluate batches")
