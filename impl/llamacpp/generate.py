"""Greedy generation with llama.cpp: its forward on the same GGUF, argmax of each
step's logits, and its own end-of-generation test (``llama_vocab_is_eog``: eos,
eot, ``<|im_end|>`` ...).

Only greedy decoding is offered: a sampled stream depends on llama.cpp's RNG, which
no other engine shares. Stop strings are refused (``Unsupported``): llama.cpp's C
API has no stop-string matching of its own, and emulating it here would gate this
adapter's code rather than llama.cpp.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from impl.protocol import Unsupported
from oracle.sampler import DEFAULTS, GREEDY_TEMPERATURE

NEUTRAL = {"repeat_penalty": 1.0, "frequency_penalty": 0.0, "presence_penalty": 0.0}


def check_greedy(params: Mapping[str, Any], adapter: str) -> tuple[int, int]:
    """(max_tokens, top_candidates) of a greedy request; anything else is Unsupported.
    Unset parameters take the documented defaults (temperature 0.8: not greedy)."""
    p = {**DEFAULTS, **params}
    if p["temperature"] >= GREEDY_TEMPERATURE:
        raise Unsupported(
            f"{adapter} generates greedily only (temperature 0); sampled streams depend on its RNG"
        )
    if any(p[k] != v for k, v in NEUTRAL.items()):
        raise Unsupported(f"{adapter} greedy generation is offered without penalties only")
    if any(p.get("stop", [])):
        raise Unsupported(f"{adapter} has no stop-string matching of its own")
    return int(p.get("max_tokens", 128)), int(p.get("top_candidates", 3))


def top_order(logits: np.ndarray, n: int) -> np.ndarray:
    """The ids of the ``n`` highest logits, by descending logit, ties in id order — the
    definition is ``np.argsort(-logits, kind="stable")[:n]``. A full sort of a 152k
    vocabulary took 21 ms per generated token (8 of the 49 s recording a tiny model's
    generate references); only the ids at or above the n-th largest value are sorted here
    (every id tied with it kept, so the stable order among ties is the definition's).
    A row with a NaN takes the definition itself (NaN orders differently in a partition)."""
    logits = np.asarray(logits)
    if n <= 0:
        return np.empty(0, dtype=np.intp)
    if n >= logits.size or np.isnan(logits).any():
        return np.argsort(-logits, kind="stable")[:n]
    nth_largest = np.partition(logits, logits.size - n)[logits.size - n]
    candidates = np.flatnonzero(logits >= nth_largest)  # in id order
    return candidates[np.argsort(-logits[candidates], kind="stable")][:n]


def top_logits(logits: np.ndarray, n: int) -> list[list[Any]]:
    """The ``n`` highest logits as ``[id, logit]``, ties in id order."""
    return [[int(i), float(logits[i])] for i in top_order(logits, n)]


def generation(ids: list[int], data: bytes, finish: str, steps: list[dict[str, Any]]) -> dict[str, Any]:
    """A greedy run's answer as PROTOCOL.md's generate result (the references' shared form)."""
    return {
        "ids": ids,
        "bytes": data.hex(),
        "text": data.decode("utf-8", errors="replace"),
        "finish_reason": finish,
        "steps": steps,
    }


def generate(llm: Any, prompt: Sequence[int], params: Mapping[str, Any]) -> dict[str, Any]:
    import llama_cpp

    max_tokens, n_top = check_greedy(params, "llama.cpp")
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    llm.reset()
    llm.eval(list(prompt))
    ids: list[int] = []
    steps = []
    finish = "length"
    for _ in range(max_tokens):
        logits = np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        token = int(np.argmax(logits))
        steps.append({"top": top_logits(logits, n_top), "token": token})
        if llama_cpp.llama_vocab_is_eog(vocab, token):
            finish = "stop_token"
            break
        ids.append(token)
        llm.eval([token])
    data = llm.detokenize(ids) if ids else b""
    return generation(ids, data, finish, steps)
