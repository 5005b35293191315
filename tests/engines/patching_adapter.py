"""A Python adapter that moves the judge: on loading it replaces the oracle's RoPE with
the original paper's pairing of adjacent dimensions ``(2i, 2i + 1)`` — a plausible way
to write a variant engine on top of the oracle — and on every call it raises what it was
told to (``SystemExit(0)``, ``KeyboardInterrupt``) or answers an endless iterator.

``--impl tests.engines.patching_adapter:PatchingEngine`` (the patch), and
``...:ExitingEngine`` / ``...:InterruptingEngine`` / ``...:EndlessEngine`` for the
escapes. In the judge's process the patch would move the reference the diagnosis and the
shrinking use (``impl.registry`` runs such adapters out of process)."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

import oracle.rope
from impl.oracle import OracleEngine


def adjacent_pairs(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """RoPE rotating pairs ``(2i, 2i + 1)``: not what a Qwen GGUF expects."""
    x1, x2 = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = x1 * cos - x2 * sin, x2 * cos + x1 * sin
    return out


class PatchingEngine(OracleEngine):
    name = "patching"

    def __init__(self) -> None:
        super().__init__()
        oracle.rope.apply_rope = adjacent_pairs


class ExitingEngine(OracleEngine):
    name = "exiting"

    def encode(self, model: Any, text: str, parse_special: bool = False) -> list[int]:
        raise SystemExit(0)


class InterruptingEngine(OracleEngine):
    name = "interrupting"

    def encode(self, model: Any, text: str, parse_special: bool = False) -> list[int]:
        raise KeyboardInterrupt


class EndlessEngine(OracleEngine):
    name = "endless"

    def encode(self, model: Any, text: str, parse_special: bool = False) -> Any:
        return itertools.repeat(1)
