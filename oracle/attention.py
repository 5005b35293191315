"""Causal grouped-query attention (GQA).

``n_head`` query heads share ``n_head_kv`` key/value heads: query head ``h`` reads
kv head ``h // (n_head / n_head_kv)``, so consecutive query heads form a group over
one kv head. Scores are scaled by ``1 / sqrt(head_dim)``; a query at absolute
position ``p`` attends to the keys at positions ``0 .. p`` (itself included) and
never to later ones.

The whole block of new queries is handled at once: queries [n_head, T, d] are
reshaped to [n_head_kv, group * T, d] — the heads of a group stacked — so that one
matrix product per kv head against its keys [S, d] serves the whole group: no loop
over heads or tokens, and plain 2-D products that numpy hands to BLAS.
"""

from __future__ import annotations

import numpy as np


def causal_mask(q_positions: np.ndarray, n_keys: int) -> np.ndarray:
    """True where query (row) may attend key (column): key position <= query position."""
    return np.arange(n_keys)[None, :] <= q_positions[:, None]


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Softmax over ``axis``, in place in ``x`` (returned): subtracting the row maximum
    first keeps exp from overflowing."""
    x -= x.max(axis=axis, keepdims=True)
    np.exp(x, out=x)
    x /= x.sum(axis=axis, keepdims=True)
    return x


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, q_positions: np.ndarray) -> np.ndarray:
    """softmax(q kᵀ / sqrt(d) + causal mask) v.

    q: [n_head, T, d] for the new tokens at ``q_positions``;
    k, v: [n_head_kv, S, d] for every cached position 0 .. S-1 (new tokens included).
    Returns [n_head, T, d].
    """
    n_head, t, d = q.shape
    n_head_kv, s, _ = k.shape
    group = n_head // n_head_kv
    # The queries of one group stacked: one [group*T, d] @ [d, S] product per kv head (BLAS).
    qg = q.reshape(n_head_kv, group * t, d)
    scores = (qg @ k.transpose(0, 2, 1)).reshape(n_head_kv, group, t, s)
    scores /= np.float32(np.sqrt(d))  # in place, as are the mask and the softmax
    scores += np.where(causal_mask(q_positions, s), np.float32(0), np.float32(-np.inf))  # [T, S]
    probs = softmax(scores).reshape(n_head_kv, group * t, s)
    return (probs @ v).reshape(n_head, t, d)
