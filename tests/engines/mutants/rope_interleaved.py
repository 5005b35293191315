"""Mutant engine: RoPE rotating interleaved pairs ``(2i, 2i+1)`` (GPT-J style)
instead of the NeoX half-split pairs ``(i, i + d/2)`` Qwen models are trained with.

Position 0 is unaffected (angle 0); every later position attends with the wrong
rotation. Expected to fail the logits gate.

    python tests/engines/mutants/rope_interleaved.py
"""

from __future__ import annotations

import sys

import numpy as np

from impl.process.server import serve
from impl.registry import resolve
from oracle import rope


def apply_rope_interleaved(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    even, odd = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = odd * cos + even * sin
    return out


def plant() -> None:
    rope.apply_rope = apply_rope_interleaved


if __name__ == "__main__":
    plant()
    sys.exit(serve(resolve("oracle")))
