"""Rotary position embedding (RoPE), NeoX style, as Qwen2 and Qwen3 use it.

Each head vector of size ``d`` is split into two halves; dimension ``i`` of the
first half and dimension ``i + d/2`` of the second form a pair that is rotated,
at position ``p``, by the angle ``p * base ** (-2i / d)``:

    x'[i]       = x[i] cos θ - x[i + d/2] sin θ
    x'[i + d/2] = x[i + d/2] cos θ + x[i] sin θ

(The original RoPE paper pairs adjacent dimensions ``(2i, 2i + 1)`` instead; a GGUF
of a Qwen model expects the half-split pairing — llama.cpp's ``rope_type`` NEOX.)
Because a rotation by ``p`` composes with one by ``-s`` into one by ``p - s``, the
dot product of a rotated query and key depends only on their distance.

Angles are computed in float64 and rounded once to float32, so the rotation is
accurate at every position of a long context.
"""

from __future__ import annotations

import numpy as np


def rope_angles(positions: np.ndarray, head_dim: int, base: float) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of the rotation angles, each [len(positions), head_dim / 2]."""
    inv_freq = base ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    theta = np.outer(np.asarray(positions, dtype=np.float64), inv_freq)
    return np.cos(theta).astype(np.float32), np.sin(theta).astype(np.float32)


def apply_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Rotate ``x`` [..., positions, head_dim] by the angles of its positions."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
