"""The decode loop: sample, stop, append, stream — one token at a time.

Each step samples a token from the current logits (``oracle.sampler``), then:

1. a stop token (eos, or ``<|im_end|>``) ends generation; it is neither emitted
   nor appended to the ids or the penalty window;
2. otherwise the token joins the ids and the penalty window, and its bytes join
   the full byte stream;
3. stop strings are searched in the whole byte stream, not in the token's own
   bytes, so a stop string straddling two tokens is caught; the earliest-starting
   match wins and the stream is cut where it starts;
4. the stream is emitted in chunks with a holdback: a chunk never ends inside a
   UTF-8 character, nor inside a stop string that the next token might complete;
5. after ``max_tokens`` tokens generation ends with reason ``length``.

The loop runs over a *logits source* — anything with ``prefill(ids)`` (logits
per prompt position) and ``step(token)`` (logits after appending one token) — so
it can be driven by crafted logits as well as by ``oracle.forward``.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from oracle import sampler
from oracle.utf8 import complete_utf8_prefix_len

#: Decode-loop parameters on top of the sampler's, with their defaults.
LOOP_DEFAULTS: dict[str, Any] = {"max_tokens": 128, "stop": [], "top_candidates": 3}

FINISH_REASONS = ("stop_token", "stop_string", "length")


class LogitsSource(Protocol):
    def prefill(self, ids: Sequence[int]) -> np.ndarray:
        """Logits for every prompt position, shape [len(ids), n_vocab]."""

    def step(self, token: int) -> np.ndarray:
        """Logits for the position after ``token``, shape [n_vocab]."""


def find_stop(stream: bytes, stops: Sequence[bytes]) -> int | None:
    """Offset where the earliest-starting stop string begins in ``stream``, or
    None. Empty stop strings are ignored (they would match everywhere)."""
    starts = [i for s in stops if s and (i := stream.find(s)) >= 0]
    return min(starts) if starts else None


def stop_prefix_start(stream: bytes, stops: Sequence[bytes]) -> int:
    """Start of the longest suffix of ``stream`` that is a proper prefix of a stop
    string (``len(stream)`` when none): bytes from there on may still become a
    stop string and must not be emitted yet."""
    for start in range(max(0, len(stream) - max((len(s) for s in stops), default=0) + 1), len(stream)):
        tail = stream[start:]
        if any(len(s) > len(tail) and s.startswith(tail) for s in stops):
            return start
    return len(stream)


def emit_limit(stream: bytes, emitted: int, stops: Sequence[bytes]) -> int:
    """How far the stream may be emitted: whole UTF-8 characters only, and not
    into a possible stop-string prefix."""
    utf8_end = emitted + complete_utf8_prefix_len(stream[emitted:])
    return max(emitted, min(utf8_end, stop_prefix_start(stream, stops)))


def top_candidates(logits: np.ndarray, n: int) -> list[list[Any]]:
    """The ``n`` highest raw logits as ``[id, logit]`` (ties in id order)."""
    n = min(n, len(logits))
    threshold = np.partition(logits, len(logits) - n)[len(logits) - n]
    near = np.flatnonzero(logits >= threshold)
    order = near[np.lexsort((near, -logits[near]))][:n]
    return [[int(i), float(logits[i])] for i in order]


def generate(
    source: LogitsSource,
    piece: Callable[[int], bytes],
    prompt: Sequence[int],
    params: Mapping[str, Any],
    stop_tokens: Sequence[int],
) -> dict[str, Any]:
    """Generate from ``prompt``. ``piece(id)`` gives a token's bytes.

    ``params`` = sampler parameters (``oracle.sampler.DEFAULTS``; the penalty
    ``window`` is ignored — it is seeded from the prompt's tail) plus
    ``max_tokens``, ``stop`` (stop strings) and ``top_candidates``.

    Returns ``{"ids", "bytes" (hex), "text", "chunks" (hex, the streamed
    pieces), "finish_reason", "steps": [{"top": [[id, logit], ...], "token"}]}``.
    """
    unknown = set(params) - set(sampler.DEFAULTS) - set(LOOP_DEFAULTS)
    if unknown:
        raise sampler.SamplerError(f"unknown generation parameter(s): {sorted(unknown)}")
    loop = {**LOOP_DEFAULTS, **{k: v for k, v in params.items() if k in LOOP_DEFAULTS}}
    sampling = {k: v for k, v in params.items() if k in sampler.DEFAULTS and k != "window"}
    p = sampler.resolve_params(sampling)
    if not isinstance(loop["max_tokens"], int) or loop["max_tokens"] < 0:
        raise sampler.SamplerError(f"max_tokens={loop['max_tokens']!r} must be a non-negative integer")
    if not prompt:
        raise sampler.SamplerError("the prompt must hold at least one token")
    if isinstance(loop["stop"], (str, bytes)):
        raise sampler.SamplerError(f"stop={loop['stop']!r} must be a list of stop strings")
    stops = [s.encode("utf-8") if isinstance(s, str) else bytes(s) for s in loop["stop"]]
    rng = random.Random(p["seed"])

    last_n = p["penalty_last_n"]
    window = list(prompt)[-last_n:] if last_n > 0 else []
    ids: list[int] = []
    stream = b""
    emitted = 0
    chunks: list[bytes] = []
    steps: list[dict[str, Any]] = []
    finish = "length"

    logits = np.asarray(source.prefill(list(prompt)))[-1] if loop["max_tokens"] > 0 else None
    for n in range(loop["max_tokens"]):
        step_params = {**sampling, "window": window}
        token = sampler.sample(logits, step_params, rng.random(), record_steps=False)["token"]
        steps.append({"top": top_candidates(np.asarray(logits), loop["top_candidates"]), "token": token})
        if token in stop_tokens:
            finish = "stop_token"
            break
        ids.append(token)
        window = [*window, token][-last_n:] if last_n > 0 else []
        stream += piece(token)
        cut = find_stop(stream, stops)
        if cut is not None:
            stream = stream[:cut]
            finish = "stop_string"
            break
        limit = emit_limit(stream, emitted, stops)
        if limit > emitted:
            chunks.append(stream[emitted:limit])
            emitted = limit
        if n + 1 < loop["max_tokens"]:
            logits = source.step(token)
    if len(stream) > emitted:
        chunks.append(stream[emitted:])
    return {
        "ids": ids,
        "bytes": stream.hex(),
        "text": stream.decode("utf-8", errors="replace"),
        "chunks": [c.hex() for c in chunks],
        "finish_reason": finish,
        "steps": steps,
    }
