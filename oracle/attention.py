"""Causal grouped-query attention (GQA) — the definition.

``n_head`` query heads share ``n_head_kv`` key/value heads: query head ``h`` reads
kv head ``h // (n_head / n_head_kv)``, so consecutive query heads form a group over
one kv head. Scores are scaled by ``1 / sqrt(head_dim)``; a query at absolute
position ``p`` attends to the keys at positions ``0 .. p`` (itself included) and
never to later ones::

    attention(Q, K, V) = softmax(Q Kᵀ / sqrt(d) + mask) V,   mask = 0 where allowed, -inf elsewhere

This module computes exactly that, densely. ``oracle.attention_blocked`` computes
the same thing in blocks of queries (skipping keys a block cannot see, normalizing
after the product with V) and is what the forward pass runs: on a 512-token prompt
it forms half the scores. ``tests/oracle/test_definitions.py`` holds the two equal
to float32 rounding.
"""

from __future__ import annotations

import numpy as np


def causal_mask(q_positions: np.ndarray, n_keys: int) -> np.ndarray:
    """True where query (row) may attend key (column): key position <= query position."""
    return np.arange(n_keys)[None, :] <= q_positions[:, None]


def softmax(scores: np.ndarray) -> np.ndarray:
    """softmax over the last axis; exp(score - row max) keeps every term <= 1 (no overflow)."""
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, q_positions: np.ndarray) -> np.ndarray:
    """softmax(q kᵀ / sqrt(d) + causal mask) v.

    q: [n_head, T, d] for the new tokens at ``q_positions`` (increasing);
    k, v: [n_head_kv, S, d] for every cached position 0 .. S-1 (new tokens included).
    Returns [n_head, T, d].
    """
    group = q.shape[0] // k.shape[0]
    k, v = np.repeat(k, group, axis=0), np.repeat(v, group, axis=0)  # kv head h // group for query head h
    scores = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1]).astype(q.dtype)  # [n_head, T, S]
    mask = np.where(causal_mask(q_positions, k.shape[1]), 0, -np.inf).astype(q.dtype)
    return softmax(scores + mask) @ v
