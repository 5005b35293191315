"""The key/value cache: what lets a decoder process one new token without redoing the past.

Attention at position ``p`` needs the keys and values of positions ``0 .. p``. They
depend only on earlier tokens (the model is causal), so each layer keeps the
rotated keys and the values it has computed and appends the new ones; a step then
costs one token's worth of projections instead of a whole prefix.

Storage grows by doubling (amortized O(1) appends) and is bounded by the model's
context length, beyond which positions — and RoPE angles the model was trained
for — do not exist: that is a ``ContextOverflow``, not a silent wrap.

``truncate(n)`` forgets every position from ``n`` on: the next append is written at
position ``n`` and attention reads keys and values only up to the new end, so no
stale entry past ``n`` is ever seen again (a conversation drops its KV from the
first token a new render changes, ``oracle.session``).
"""

from __future__ import annotations

import numpy as np


class ContextOverflow(ValueError):
    """More positions were asked for than the model's context holds."""


class KVCache:
    """Per-layer keys and values, [n_head_kv, n_past, head_dim] each."""

    def __init__(self, n_layer: int, n_head_kv: int, head_dim: int, n_ctx: int) -> None:
        self.n_layer, self.n_head_kv, self.head_dim, self.n_ctx = n_layer, n_head_kv, head_dim, n_ctx
        self.reset()

    def reset(self) -> None:
        self.n_past = 0
        self._k: list[np.ndarray] = [np.empty((self.n_head_kv, 0, self.head_dim), np.float32)] * self.n_layer
        self._v: list[np.ndarray] = list(self._k)

    def truncate(self, n: int) -> None:
        """Keep the first ``n`` positions only (0 <= n <= n_past)."""
        if not 0 <= n <= self.n_past:
            raise ValueError(f"cannot truncate the KV cache to {n} tokens: it holds {self.n_past}")
        self.n_past = n

    def check_room(self, n_new: int) -> None:
        if self.n_past + n_new > self.n_ctx:
            raise ContextOverflow(
                f"context overflow: {self.n_past} cached + {n_new} new tokens = positions up to "
                f"{self.n_past + n_new - 1}, but the model's context is n_ctx={self.n_ctx} (positions 0..{self.n_ctx - 1})"
            )

    def append(self, layer: int, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Store the new tokens' k, v [n_head_kv, T, d] after the ``n_past`` cached ones;
        return every key and value of the layer so far, [n_head_kv, n_past + T, d]."""
        end = self.n_past + k.shape[1]
        if end > self._k[layer].shape[1]:
            capacity = min(self.n_ctx, max(end, 2 * self._k[layer].shape[1], 16))
            for store in (self._k, self._v):
                grown = np.empty((self.n_head_kv, capacity, self.head_dim), np.float32)
                grown[:, : self.n_past] = store[layer][:, : self.n_past]
                store[layer] = grown
        self._k[layer][:, self.n_past : end] = k
        self._v[layer][:, self.n_past : end] = v
        return self._k[layer][:, :end], self._v[layer][:, :end]

    def rows(self, layer: int, start: int, end: int) -> tuple[np.ndarray, np.ndarray]:
        """The layer's keys and values of positions ``start .. end - 1`` (a view, 0 <= start
        <= end <= n_past), [n_head_kv, end - start, head_dim] each."""
        if not 0 <= start <= end <= self.n_past:
            raise ValueError(f"positions {start}..{end - 1} are not among the {self.n_past} cached")
        return self._k[layer][:, start:end], self._v[layer][:, start:end]

    def advance(self, n_new: int) -> None:
        """Commit ``n_new`` positions once every layer has appended them."""
        self.n_past += n_new
