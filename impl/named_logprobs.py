"""A ``logits`` answer that holds only what the engine said: per position, the
log-probabilities of the candidates the engine could name by id, and nothing about
the rest.

A server that names its top-k candidates by text (llama-cpp-python) cannot say which
id an ambiguous text belongs to: every control token reads as ``""``, and pieces of a
split character collide with whole ones. Spreading the mass of such candidates over
the vocabulary would make "unnamed" read as "improbable" (``<|im_end|>`` at 0.993 became
~1e-6). This answer leaves it unnamed instead: the probability outside the named ids
(``1 - Σ exp(logprob)``) is one remainder, of unknown composition, and specgate judges
each position on the named ids alone (``specgate.checks.logit_named``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class NamedLogprobs:
    n_vocab: int
    ids: np.ndarray  # int64 [n, k]; -1 is an empty slot (a row names fewer than k ids)
    logprobs: np.ndarray  # float64 [n, k]; -inf in empty slots
    unnamed: str  # why some candidates have no id (shown with the verdict)

    def __len__(self) -> int:
        return len(self.ids)

    @classmethod
    def from_rows(cls, rows: Sequence[dict[int, float]], n_vocab: int, unnamed: str) -> NamedLogprobs:
        """From one ``{id: log-prob}`` per position."""
        k = max((len(r) for r in rows), default=0)
        ids = np.full((len(rows), k), -1, dtype=np.int64)
        logprobs = np.full((len(rows), k), -np.inf, dtype=np.float64)
        for t, row in enumerate(rows):
            for j, (token, value) in enumerate(sorted(row.items(), key=lambda kv: -kv[1])):
                ids[t, j], logprobs[t, j] = int(token), float(value)
        return cls(n_vocab, ids, logprobs, unnamed)

    def row(self, t: int) -> dict[int, float]:
        """Position ``t``'s named ids and their log-probabilities."""
        keep = self.ids[t] >= 0
        return dict(zip(self.ids[t][keep].tolist(), self.logprobs[t][keep].tolist(), strict=True))
