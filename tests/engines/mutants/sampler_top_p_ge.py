"""Mutant engine: top-p stopping when the cumulative probability reaches p
(``>=``) instead of when it exceeds it (``>``).

When a prefix of candidates sums to exactly p, the token that would cross p is
dropped: the nucleus is one candidate short. Expected to fail the sample gate.

    python tests/engines/mutants/sampler_top_p_ge.py
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

import numpy as np

from impl.process.server import serve
from impl.registry import resolve
from oracle import sampler


def top_p_ge(logits: np.ndarray, p: Mapping[str, Any]) -> np.ndarray:
    nucleus = p["top_p"]
    if nucleus <= 0.0 or nucleus >= 1.0:
        return logits
    probs = sampler.softmax(logits)
    order = np.argsort(-probs, kind="stable")
    cumulative = np.cumsum(probs[order])
    crossed = np.flatnonzero(cumulative >= nucleus)  # the defect: >= instead of >
    n_keep = crossed[0] + 1 if len(crossed) else len(order)
    out = np.full_like(logits, -np.inf)
    out[order[:n_keep]] = logits[order[:n_keep]]
    return out


def plant() -> None:
    sampler.STEPS["top_p"] = top_p_ge


if __name__ == "__main__":
    plant()
    sys.exit(serve(resolve("oracle")))
