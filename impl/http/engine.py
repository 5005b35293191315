"""``--impl 'http:<base url>'``: gate a running inference server through the endpoints
servers in this ecosystem offer.

The server's flavour is recognised by probing the base URL once; each flavour is one
module over the shared client (``transport``):

* **llama-cpp-python** (``llama_cpp_python``, found by its ``/openapi.json`` listing
  ``/extras/tokenize``);
* **llama.cpp server** (``llama_server``, found by ``/props``).

Capabilities are what the server can answer faithfully:

=============  ==================================  ===================================
capability     llama-cpp-python                     llama.cpp server
=============  ==================================  ===================================
encode         yes (it always parses special        yes (``parse_special`` honoured)
               tokens: ``parse_special=False`` is
               declined when the text holds ``<``)
decode         yes (the server answers text: ids    yes
               whose bytes are not valid UTF-8 are
               declined)
render         no                                   ``/apply-template``
logits         top-k log-probs per position         top-k per position
               (``SPECGATE_HTTP_TOP_K``, default 64)
generate       greedy, ids from the log-prob tokens  greedy
session        the server's prefix reuse: each      no
               append a one-token completion of
               the whole session's text; the last
               position's top-k, named (below)
=============  ==================================  ===================================

A server speaks in log-probabilities of its top-k candidates, not logits. When it
names every candidate by id, the ``logits`` answer is a ``[n, n_vocab]`` array that
holds the top-k log-probabilities exactly and spreads the remaining probability mass
evenly over the other ids (the protocol's top-k form): its softmax reproduces the
server's top-k probabilities, so top-1 agreement and KL over the top-k are measured
exactly; nothing outside the top-k is claimed. When it cannot name some candidate
(llama-cpp-python's text names), the answer is ``impl.named_logprobs.NamedLogprobs``:
the named ids only, the rest an unnamed remainder — never spread, which would turn
"unnamed" into "improbable". A session's row is always that named answer (its one
position): the reference's top-k reaches past the server's where the two tails order
near-equal candidates differently, and a spread row would call those ids improbable
(measured: a fresh server's own one-shot row, equal to llama.cpp's in-process to 4
decimals, was judged KL 0.0304 as a spread top-64, 0.0014 as the full row).

A server serves one model: asking about another is declined (``Unsupported``)
naming the model the server has. Transport failures (connection, HTTP 5xx, the
whole-request deadline ``SPECGATE_HTTP_TIMEOUT``, the body bound
``SPECGATE_HTTP_MAX_BODY_BYTES``) are ``EngineError`` (outcome ``error``), see
``transport``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from impl import bounds
from impl.envvars import env_count
from impl.http import vocab
from impl.http.llama_cpp_python import LlamaCppPythonServer
from impl.http.llama_server import LlamaServer
from impl.http.transport import ClientError, HttpClient
from impl.named_logprobs import NamedLogprobs
from impl.protocol import Engine, EngineError, Messages, ModelRef, Unsupported

#: What reading an answer of another shape than the endpoint's raises (a list where an
#: object belongs, a string where ids do): the server's error, never a *fail*.
MISSHAPEN = (AttributeError, KeyError, TypeError, IndexError, ValueError)


def _shaped(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method``, an answer it cannot read being an ``EngineError`` naming the op."""

    @functools.wraps(method)
    def read(self: HttpEngine, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except (EngineError, Unsupported):
            raise
        except MISSHAPEN as exc:
            said = bounds.cut(f"{type(exc).__name__}: {exc}", 300)
            raise EngineError(
                f"http: {self.base_url} answered {method.__name__} in a shape this adapter cannot read ({said})"
            ) from None

    return read


class HttpEngine(Engine):
    name = "http"

    def __init__(self, base_url: str, timeout: float | None = None, top_k: int | None = None):
        self.client = HttpClient(base_url, timeout)
        self.top_k = top_k if top_k is not None else env_count("SPECGATE_HTTP_TOP_K", 64, "candidates")
        self._server: LlamaCppPythonServer | LlamaServer | None = None
        #: Open sessions: id -> (model, the ids the session holds); the KV is the server's.
        self._sessions: dict[str, tuple[ModelRef, list[int]]] = {}
        self._opened = 0

    @property
    def base_url(self) -> str:
        return self.client.base_url

    @_shaped
    def _probe(self) -> LlamaCppPythonServer | LlamaServer:
        """The server's flavour, probed on first use."""
        if self._server is None:
            self._server = LlamaCppPythonServer.probe(self.client, self.top_k)
        if self._server is None:
            try:
                self._server = LlamaServer.probe(self.client, self.top_k)
            except ClientError as exc:
                raise EngineError(
                    f"http: {self.base_url} offers neither llama-cpp-python's /openapi.json nor "
                    f"llama.cpp's /props (HTTP {exc.code})"
                ) from None
        return self._server

    def _serving(self, model: ModelRef) -> LlamaCppPythonServer | LlamaServer:
        """The server, if it serves ``model`` (or does not say which model it serves)."""
        server = self._probe()
        if server.served is not None:
            served = Path(server.served)
            if served.name != model.gguf.name and served.resolve() != model.gguf.resolve():
                raise Unsupported(
                    f"the server at {self.base_url} serves {server.served}, not {model.id} ({model.gguf}); "
                    f"gate it with --model pointing at that file"
                )
        return server

    # --- protocol surface --------------------------------------------------------------
    @property
    def capabilities(self) -> frozenset[str]:
        return self._probe().capabilities

    def version(self) -> str:
        return f"{self._probe().name} server at {self.base_url}"

    @_shaped
    def encode(self, model: ModelRef, text: str, parse_special: bool) -> list[int]:
        ids = self._serving(model).encode(text, parse_special)
        size = len(text.encode("utf-8", "surrogatepass"))
        bounds.check_count(
            len(ids), size, "tokens", f"a token covers at least one byte of the {size}-byte text"
        )
        bounds.check_ids(ids, bounds.model_n_vocab(model.gguf), "tokens")
        return ids

    @_shaped
    def decode(self, model: ModelRef, ids: Sequence[int]) -> bytes:
        out = self._serving(model).decode(ids)
        most = len(ids) * bounds.BOUNDS.piece_bytes
        if len(out) > most:
            raise bounds.oversize(
                "content", len(out), "bytes", most, f"{bounds.BOUNDS.piece_bytes} bytes a token"
            )
        return out

    @_shaped
    def render(
        self, model: ModelRef, messages: Messages, add_generation_prompt: bool = True, **kwargs: Any
    ) -> str:
        server = self._serving(model)
        if not add_generation_prompt or kwargs:
            raise Unsupported(
                "/apply-template always adds the generation prompt and takes no template variables"
            )
        text = server.render(messages)
        if not isinstance(text, str):
            raise TypeError(f"prompt is a {type(text).__name__}, not a string")
        bounds.check_text(text, "prompt")
        return text

    @_shaped
    def logits(self, model: ModelRef, ids: Sequence[int], positions: Sequence[int] | None = None) -> Any:
        """The log-probs after each of ``positions`` (every position when None), asked of
        the server at those positions only."""
        server = self._serving(model)
        n_vocab = len(vocab.texts(model.gguf))
        asked = list(range(len(ids))) if positions is None else [int(p) for p in positions]
        answer = server.logit_rows(model, [int(i) for i in ids], asked)
        rows, unnamed = answer if isinstance(answer, tuple) else (answer, "")
        if len(rows) != len(asked):
            raise EngineError(
                f"http: the server answered {len(rows)} log-prob rows for {len(asked)} positions"
            )
        if unnamed:
            return NamedLogprobs.from_rows(rows, n_vocab, unnamed)
        return np.stack([_spread(row, n_vocab, k) for k, row in enumerate(rows)])

    @_shaped
    def generate(self, model: ModelRef, ids: Sequence[int], params: dict[str, Any]) -> dict[str, Any]:
        server = self._serving(model)
        greedy = float(params.get("temperature", 0.8)) < 1e-6 or int(params.get("top_k", 40)) == 1
        if not greedy:
            raise Unsupported("a server's random draws cannot be replayed; only greedy generation is gated")
        max_tokens = int(params.get("max_tokens", 32))
        stop = [s if isinstance(s, str) else bytes(s).decode("utf-8") for s in params.get("stop", [])]
        new, text, reason = server.generate(model, ids, max_tokens, stop)
        bounds.check_count(len(new), max_tokens, "completion_probabilities", "the request's n_predict")
        bounds.check_ids([i for i in new if i is not None], bounds.model_n_vocab(model.gguf), "ids")
        bounds.check_text(text, "content", max_tokens * bounds.BOUNDS.piece_bytes, "n_predict tokens")
        return {"ids": new, "bytes": text.encode("utf-8").hex(), "text": text, "finish_reason": reason}

    # --- sessions: the server's prefix reuse (PROTOCOL.md 4.7) -------------------------
    def _session_server(self, model: ModelRef) -> LlamaCppPythonServer:
        server = self._serving(model)
        if not isinstance(server, LlamaCppPythonServer):
            raise Unsupported(f"sessions are gated on llama-cpp-python's server only, not {server.name}'s")
        return server

    def session_open(self, model: ModelRef) -> str:
        self._session_server(model)
        self._opened += 1
        sid = f"s{self._opened}"
        self._sessions[sid] = (model, [])
        return sid

    def _held(self, session: str) -> tuple[ModelRef, list[int]]:
        try:
            return self._sessions[session]
        except KeyError:
            raise EngineError(f"http: no open session {session!r}") from None

    @_shaped
    def session_append(self, session: str, ids: Sequence[int]) -> dict[str, Any]:
        model, held = self._held(session)
        whole = [*held, *(int(i) for i in ids)]
        top, unnamed = self._session_server(model).last_row(model, whole)
        n_vocab = len(vocab.texts(model.gguf))
        _checked(top, n_vocab, len(whole) - 1)
        self._sessions[session] = (model, whole)
        # Named, never spread: the reference's top-k reaches past the server's where their
        # tails differ in order, and a spread row would claim those ids improbable.
        row = NamedLogprobs.from_rows([top], n_vocab, unnamed or "the server names only its top-k")
        return {"n_past": len(whole), "logits": row}

    def session_truncate(self, session: str, n: int) -> int:
        model, held = self._held(session)
        if not 0 <= n <= len(held):
            raise ValueError(f"session_truncate to {n} tokens: the session holds {len(held)}")
        self._sessions[session] = (model, held[:n])
        return n

    def session_close(self, session: str) -> None:
        self._held(session)
        del self._sessions[session]


def _checked(top: dict[int, float], n_vocab: int, position: int) -> None:
    """Ids outside ``0 <= id < n_vocab`` and non-finite or positive log-probs are an
    ``EngineError`` naming the position, never an index that wraps around."""
    field = f"top_logprobs[{position}]"
    bounds.check_ids(list(top), n_vocab, field + " id")
    for token, logprob in top.items():
        if math.isnan(logprob) or logprob > 1e-4:  # -inf: a probability that underflowed
            raise EngineError(f"http: answer field {field} gives id {token} the log-prob {logprob!r}")


def _spread(top: dict[int, float], n_vocab: int, position: int = 0) -> np.ndarray:
    """A log-prob row holding ``top`` exactly; the rest of the mass spread evenly.
    Ids outside ``0 <= id < n_vocab`` and non-finite or positive log-probs are an
    ``EngineError`` naming the position, never an index that wraps around."""
    _checked(top, n_vocab, position)
    mass = sum(math.exp(v) for v in top.values())
    rest = max(1.0 - mass, 1e-30) / max(n_vocab - len(top), 1)
    row = np.full(n_vocab, math.log(rest), dtype=np.float32)
    for token, logprob in top.items():
        row[token] = logprob
    return row
