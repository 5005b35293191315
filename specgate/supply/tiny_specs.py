"""The tiny models' catalogue: families, tensor types and ids (``tiny-<family>-<type>``).

Data only, importing nothing of the suite, so that both the models cache
(``specgate.supply.models``, which resolves tiny ids) and the generator (``specgate.supply.tiny``,
which writes them into that cache) can read it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass

TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k", "q5_k", "q6_k")
VOCAB_SOURCE = "qwen2.5-coder-0.5b-instruct"  # the GGUF whose tokenizer.* keys the tiny models carry
N_VOCAB = 151936


@dataclass(frozen=True)
class TinySpec:
    arch: str
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    tied: bool
    seed: int
    types: tuple[str, ...] = TYPES
    n_ctx: int = 4096
    rope_base: float = 1_000_000.0
    rms_eps: float = 1e-6


FAMILIES: dict[str, TinySpec] = {
    "qwen2": TinySpec("qwen2", n_embd=64, n_layer=2, n_head=4, n_head_kv=2, head_dim=16, n_ff=256, tied=False, seed=2),
    "qwen3": TinySpec("qwen3", n_embd=64, n_layer=3, n_head=8, n_head_kv=2, head_dim=32, n_ff=256, tied=False, seed=3),
    "qwen2-tied": TinySpec("qwen2", n_embd=128, n_layer=2, n_head=4, n_head_kv=1, head_dim=32, n_ff=512, tied=True,
                           seed=5, types=("f32", "bf16", "q8_0", "q4_k", "q6_k")),
}  # fmt: skip


def model_ids() -> list[str]:
    return [f"tiny-{family}-{t}" for family, spec in FAMILIES.items() for t in spec.types]


def parse_id(model_id: str) -> tuple[str, str] | None:
    """``tiny-qwen2-tied-q4_k`` -> (``qwen2-tied``, ``q4_k``); None if not a tiny id."""
    if not model_id.startswith("tiny-"):
        return None
    family, _, kind = model_id[len("tiny-") :].rpartition("-")
    if family in FAMILIES and kind in FAMILIES[family].types:
        return family, kind
    return None
