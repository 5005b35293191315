"""The sampler: a chain of steps that turns one logit vector into a token id.

Each step maps a logit vector to a logit vector; a token a step removes gets the
logit ``-inf`` (probability 0), so the surviving *candidate set* after any step
is simply the finite entries. The order of the steps is data (``params["chain"]``),
so the chain the engine documentation gives and llama.cpp's default chain can both
be written down and compared step by step:

    penalties ─► top_k ─► top_p ─► min_p ─► temperature ─► softmax ─► draw(r)

The draw takes ``r`` (uniform in [0, 1)) as an argument instead of owning a
random generator: engines with different RNGs can then still be compared on
everything before the draw, and on the draw itself for the same ``r``.

Every step is computed in float64 from the float32 logits; its semantics, where
engines commonly differ, are spelled out in the step's docstring.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from numbers import Integral
from typing import Any

import numpy as np

#: The chain the engine documentation gives (llama.cpp's default common-sampler
#: order, restricted to the steps enabled by default, is the same sequence).
DOCUMENTED_CHAIN: tuple[str, ...] = ("penalties", "top_k", "top_p", "min_p", "temperature")

#: llama.cpp's default common-sampler order; the steps this oracle does not
#: implement (dry, top_n_sigma, typ_p, xtc) are disabled by default there.
LLAMACPP_DEFAULT_ORDER: tuple[str, ...] = (
    "penalties",
    "dry",
    "top_n_sigma",
    "top_k",
    "typ_p",
    "top_p",
    "min_p",
    "xtc",
    "temperature",
)

#: Defaults as the engine documentation gives them.
DEFAULTS: dict[str, Any] = {
    "chain": list(DOCUMENTED_CHAIN),
    "temperature": 0.8,
    "top_k": 40,
    "top_p": 0.95,
    "min_p": 0.0,
    "repeat_penalty": 1.1,
    "frequency_penalty": 0.0,
    "presence_penalty": 0.0,
    "penalty_last_n": 64,
    "seed": 42,
    "window": [],
}

#: Below this temperature sampling is replaced by argmax (after the penalties).
GREEDY_TEMPERATURE = 1e-6


class SamplerError(ValueError):
    """A sampling parameter or logit vector is unusable (named in the message)."""


# ---------------------------------------------------------------------------
# the steps


def penalties(logits: np.ndarray, p: Mapping[str, Any]) -> np.ndarray:
    """Penalize tokens seen in the last ``penalty_last_n`` tokens of the window.

    Per distinct token: subtract ``count × frequency_penalty + presence_penalty``
    first, then apply the repeat penalty, which pushes the logit towards "less
    likely" whatever its sign (divide a positive logit, multiply a non-positive
    one). A repeat penalty of exactly 1 is no penalty. Ids outside the
    vocabulary are skipped: a corrupted window must not crash the sampler.
    """
    last_n = p["penalty_last_n"]
    window = list(p["window"])[-last_n:] if last_n > 0 else []
    out = logits.copy()
    repeat = p["repeat_penalty"]
    for token, count in Counter(window).items():
        if not 0 <= token < len(out):
            continue
        v = out[token] - count * p["frequency_penalty"] - p["presence_penalty"]
        if repeat != 1.0:
            v = v * repeat if v <= 0 else v / repeat
        out[token] = v
    return out


def top_k(logits: np.ndarray, p: Mapping[str, Any]) -> np.ndarray:
    """Keep the ``top_k`` highest logits; every token tied with the k-th is kept.
    Disabled for k = 0 or k ≥ the vocabulary size."""
    k = p["top_k"]
    if k == 0 or k >= len(logits):
        return logits
    threshold = np.sort(logits)[-k]
    return np.where(logits >= threshold, logits, -np.inf)


def top_p(logits: np.ndarray, p: Mapping[str, Any]) -> np.ndarray:
    """Nucleus: walk the candidates by descending probability (stable: equal
    probabilities in id order) and keep them until the cumulative probability is
    strictly greater than ``top_p``; the token that crosses it is kept. Disabled
    for p ≤ 0 or p ≥ 1."""
    nucleus = p["top_p"]
    if nucleus <= 0.0 or nucleus >= 1.0:
        return logits
    probs = softmax(logits)
    order = np.argsort(-probs, kind="stable")
    cumulative = np.cumsum(probs[order])
    crossed = np.flatnonzero(cumulative > nucleus)
    n_keep = crossed[0] + 1 if len(crossed) else len(order)
    out = np.full_like(logits, -np.inf)
    keep = order[:n_keep]
    out[keep] = logits[keep]
    return out


def min_p(logits: np.ndarray, p: Mapping[str, Any]) -> np.ndarray:
    """Keep tokens whose probability is at least ``min_p`` × the top probability,
    i.e. logits ≥ max + ln(min_p). The argmax always survives. Disabled for 0."""
    floor = p["min_p"]
    if floor <= 0.0:
        return logits
    threshold = logits.max() + math.log(floor)
    return np.where(logits >= threshold, logits, -np.inf)


def temperature(logits: np.ndarray, p: Mapping[str, Any]) -> np.ndarray:
    """Divide the logits by the temperature (the greedy shortcut handles T < 1e-6)."""
    return logits / p["temperature"]


STEPS: dict[str, Callable[[np.ndarray, Mapping[str, Any]], np.ndarray]] = {
    "penalties": penalties,
    "top_k": top_k,
    "top_p": top_p,
    "min_p": min_p,
    "temperature": temperature,
}


def softmax(logits: np.ndarray) -> np.ndarray:
    """Probabilities of the finite logits; removed tokens (-inf) get 0."""
    z = np.exp(logits - logits.max())
    return z / z.sum()


def greedy(logits: np.ndarray) -> int:
    """The first index holding the maximum logit."""
    return int(np.argmax(logits))


def draw(ids: Sequence[int], probs: Sequence[float], r: float) -> int:
    """The first candidate (in the given order) whose cumulative probability
    reaches ``r``; the last candidate when rounding leaves the total below r."""
    cumulative = 0.0
    for token, prob in zip(ids, probs, strict=True):
        cumulative += prob
        if cumulative >= r:
            return int(token)
    return int(ids[-1])


# ---------------------------------------------------------------------------
# the chain


def candidates(logits: np.ndarray) -> tuple[list[int], list[float]]:
    """The surviving candidates (finite logits) by descending probability, equal
    probabilities in id order, with their softmax probabilities."""
    probs = softmax(logits)
    alive = np.flatnonzero(np.isfinite(logits))
    order = alive[np.argsort(-probs[alive], kind="stable")]
    return order.tolist(), probs[order].tolist()


def resolve_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """The documented defaults overlaid with ``params``, validated."""
    unknown = set(params) - set(DEFAULTS)
    if unknown:
        raise SamplerError(f"unknown sampling parameter(s): {sorted(unknown)}")
    p = {**DEFAULTS, **params}
    bad = [s for s in p["chain"] if s not in STEPS]
    if bad:
        raise SamplerError(f"unknown chain step(s) {bad}; known: {sorted(STEPS)}")
    checks = [
        ("temperature", p["temperature"] >= 0),
        ("top_k", isinstance(p["top_k"], int) and p["top_k"] >= 0),
        ("top_p", 0.0 <= p["top_p"] <= 1.0),
        ("min_p", 0.0 <= p["min_p"] <= 1.0),
        ("repeat_penalty", p["repeat_penalty"] > 0),
        ("frequency_penalty", math.isfinite(p["frequency_penalty"])),
        ("presence_penalty", math.isfinite(p["presence_penalty"])),
        ("penalty_last_n", isinstance(p["penalty_last_n"], int) and p["penalty_last_n"] >= 0),
        ("window", all(isinstance(t, Integral) and not isinstance(t, bool) for t in p["window"])),
    ]
    for name, ok in checks:
        if not ok:
            raise SamplerError(f"sampling parameter {name}={p[name]!r} is out of range")
    return p


def sample(logits: Any, params: Mapping[str, Any], r: float, *, record_steps: bool = True) -> dict[str, Any]:
    """Run the chain over ``logits`` and draw with ``r``.

    Returns ``{"chain": [steps run], "steps": [{"step", "ids", "probs"}, ...],
    "ids", "probs", "token"}``: the candidate set after each step (by descending
    probability, with the softmax of the surviving logits), the final candidates
    after temperature and softmax, and the token drawn for ``r``.

    With temperature < 1e-6 only the penalty steps run and the token is the
    argmax (the "greedy" step), so greedy decoding still honours penalties.
    ``record_steps=False`` leaves ``steps`` empty (a decode loop needs only the
    token; sorting the whole vocabulary after every step is the costly part).
    """
    p = resolve_params(params)
    x = np.asarray(logits, dtype=np.float64)
    if x.ndim != 1 or len(x) == 0:
        raise SamplerError(f"logits must be a non-empty vector, got shape {x.shape}")
    if np.isnan(x).any() or not np.isfinite(x).any() or np.isposinf(x).any():
        raise SamplerError("logits contain NaN or +inf, or no finite value")
    if not 0.0 <= r < 1.0:
        raise SamplerError(f"r={r!r} must be in [0, 1)")

    is_greedy = p["temperature"] < GREEDY_TEMPERATURE
    chain = [s for s in p["chain"] if s == "penalties"] if is_greedy else list(p["chain"])
    steps = []
    for name in chain:
        x = STEPS[name](x, p)
        if record_steps:
            ids, probs = candidates(x)
            steps.append({"step": name, "ids": ids, "probs": probs})
    if is_greedy:
        token = greedy(x)
        if record_steps:
            steps.append({"step": "greedy", "ids": [token], "probs": [1.0]})
        return {"chain": [*chain, "greedy"], "steps": steps, "ids": [token], "probs": [1.0], "token": token}
    ids, probs = candidates(x)
    return {"chain": chain, "steps": steps, "ids": ids, "probs": probs, "token": draw(ids, probs, r)}
