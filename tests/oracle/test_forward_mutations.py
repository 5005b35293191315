"""Mutation evidence for the logits gate: plant a classic forward-pass mistake in the
oracle, and the tight gate against the transformers snapshot must fail (and, for
each, the unmutated oracle must pass the same check — so it is the mutation that
the gate catches)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from oracle import attention, rope
from oracle.forward import Model
from specgate.checks.logits import check_exact
from specgate.supply import models
from specgate.supply.models import model_ref
from specgate.upkeep import snapshots


def interleaved_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """The original RoPE paper's pairing (2i, 2i+1) instead of NeoX's (i, i + d/2)."""
    x1, x2 = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = x1 * cos - x2 * sin, x2 * cos + x1 * sin
    return out


def linear_without_bias(self: Model, x: np.ndarray, layer: int, name: str) -> np.ndarray:
    return self.weights.matmul(x, f"blk.{layer}.{name}.weight")


def no_qk_norm(self: Model, layer: int, q: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return q, k


def mask_one_ahead(q_positions: np.ndarray, n_keys: int) -> np.ndarray:
    """Off by one: each query also sees the next token."""
    return np.arange(n_keys)[None, :] <= q_positions[:, None] + 1


MUTATIONS: dict[str, tuple[str, Callable[[pytest.MonkeyPatch], None]]] = {
    "interleaved-rope": ("tiny-qwen2-f32", lambda mp: mp.setattr(rope, "apply_rope", interleaved_rope)),
    "qwen2-missing-qkv-bias": (
        "tiny-qwen2-f32",
        lambda mp: mp.setattr(Model, "_linear", linear_without_bias),
    ),
    "qwen3-missing-qk-norm": ("tiny-qwen3-f32", lambda mp: mp.setattr(Model, "_qk_norm", no_qk_norm)),
    "causal-mask-off-by-one": (
        "tiny-qwen2-f32",
        lambda mp: mp.setattr(attention, "causal_mask", mask_one_ahead),
    ),
}
PROMPT = "chat_basic"  # 26 tokens: attention over a real prefix at every position


def gate(model_id: str) -> str | None:
    """Run the tight logits gate's check for PROMPT with a fresh oracle model."""
    model = model_ref(model_id)
    case = snapshots.load(model, "logits")[PROMPT]
    got = Model.from_gguf(model.gguf).prefill(case["ids"])
    return check_exact(model_id, case, got)[0]


@pytest.mark.parametrize("mutation", list(MUTATIONS))
def test_tight_logits_gate_catches(mutation, monkeypatch):
    model_id, plant = MUTATIONS[mutation]
    if model_id not in models.cached_tiny_models() or model_id not in snapshots.available("logits"):
        pytest.skip(f"{model_id} or its logits snapshot is missing")
    assert gate(model_id) is None, "the unmutated oracle must pass the gate"
    plant(monkeypatch)
    failure = gate(model_id)
    assert failure is not None, f"mutation {mutation!r} was not caught by the tight logits gate"
    assert "max |Δlogit|" in failure
