"""A sampler and decode-loop engine whose defects are chosen on its command line: the
oracle served over PROTOCOL.md with classic sampler and generation bugs planted, to check
that each diagnosis of ``specgate.diagnose`` (``sampler.py``, ``generate.py``) names its
own bug and not a look-alike. The plants are written here, independently of the
diagnosis catalogue (top-p ≥ and stop strings per token are the mutants of ``mutants/``).

    python tests/engines/fixable_sampler.py [--defects temp_first,stop_kept,...]
"""

from __future__ import annotations

import math
import sys

import numpy as np
from planted_defects import serve_with_defects  # the sibling module (this script's folder is on sys.path)

from oracle import decode_loop, sampler


def reorder(change) -> None:
    """The engine runs (and reports) the steps in ``change(requested chain)``'s order."""
    sample = sampler.sample
    sampler.sample = lambda logits, params, r, **kw: sample(
        logits, {**params, "chain": change(list(params.get("chain", sampler.DOCUMENTED_CHAIN)))}, r, **kw
    )


def moved(step: str, before: str | None):
    def change(chain):
        if step not in chain:
            return chain
        chain.remove(step)
        chain.insert(chain.index(before) if before in chain else len(chain) if before else 0, step)
        return chain

    return change


def after_penalties(chain):
    if "temperature" in chain:
        chain.remove("temperature")
        chain.insert(chain.index("penalties") + 1 if "penalties" in chain else 0, "temperature")
    return chain


def penalties_first(chain):
    return ["penalties", *(s for s in chain if s != "penalties")] if "penalties" in chain else chain


def top_p_one_more(logits, p):
    """The nucleus keeps one candidate past the one that crosses p."""
    if p["top_p"] <= 0.0 or p["top_p"] >= 1.0:
        return logits
    probs = sampler.softmax(logits)
    order = np.argsort(-probs, kind="stable")
    over = np.flatnonzero(np.cumsum(probs[order]) > p["top_p"])
    n = over[0] + 2 if len(over) else len(order)
    out = np.full_like(logits, -np.inf)
    out[order[:n]] = logits[order[:n]]
    return out


def min_p_with(threshold):
    def step(logits, p):
        if p["min_p"] <= 0.0:
            return logits
        return np.where(logits >= threshold(logits, p), logits, -np.inf)

    return step


def with_params(change) -> None:
    generate = decode_loop.generate
    decode_loop.generate = lambda source, piece, prompt, params, *a, **kw: generate(
        source, piece, prompt, change(dict(params)), *a, **kw
    )


def with_pieces(change) -> None:
    generate = decode_loop.generate
    decode_loop.generate = lambda source, piece, *a, **kw: generate(
        source, lambda t: change(piece(t)), *a, **kw
    )


def stop_kept(stream, stops):
    hits = [(i, i + len(s)) for s in stops if s and (i := stream.find(s)) >= 0]
    return min(hits)[1] if hits else None


def no_holdback(stream, emitted, stops):
    return max(emitted, min(len(stream), decode_loop.stop_prefix_start(stream, stops)))


DEFECTS = {
    # sampler
    "temp_first": lambda: reorder(moved("temperature", "penalties")),
    "temp_before_filters": lambda: reorder(after_penalties),
    "min_p_first": lambda: reorder(
        lambda c: (
            moved("min_p", "top_p")(c)
            if {"min_p", "top_p"} <= set(c) and c.index("min_p") > c.index("top_p")
            else c
        )
    ),
    "min_p_last": lambda: reorder(moved("min_p", None)),  # a look-alike of min_p_first
    "chain_fixed": lambda: reorder(lambda chain: list(sampler.DOCUMENTED_CHAIN)),
    "penalties_first": lambda: reorder(penalties_first),  # a look-alike of chain_fixed
    "top_p_one_more": lambda: sampler.STEPS.update(top_p=top_p_one_more),  # a look-alike of top-p ≥
    # min-p on the logits divided by T; as an absolute floor; at half the documented ratio
    "min_p_scaled": lambda: sampler.STEPS.update(
        min_p=min_p_with(lambda x, p: x.max() + p["temperature"] * math.log(p["min_p"]))
    ),
    "min_p_absolute": lambda: sampler.STEPS.update(
        min_p=min_p_with(lambda x, p: min(x.max(), x.max() + math.log(p["min_p"] / sampler.softmax(x).max())))
    ),
    "min_p_half": lambda: sampler.STEPS.update(
        min_p=min_p_with(lambda x, p: x.max() + math.log(p["min_p"] / 2))
    ),
    # decode loop
    "stop_kept": lambda: setattr(decode_loop, "find_stop", stop_kept),
    "max_minus_one": lambda: with_params(lambda p: {**p, "max_tokens": max(0, p.get("max_tokens", 128) - 1)}),
    # a look-alike of max_minus_one
    "max_minus_two": lambda: with_params(lambda p: {**p, "max_tokens": max(0, p.get("max_tokens", 128) - 2)}),
    "pieces_text": lambda: with_pieces(lambda b: b.decode("utf-8", "replace").encode("utf-8")),
    "no_holdback": lambda: setattr(decode_loop, "emit_limit", no_holdback),
}


if __name__ == "__main__":
    sys.exit(serve_with_defects(DEFECTS))
