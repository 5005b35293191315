"""What ``oracle.forward.Model`` checks before it runs: the file holds the model the
hyper-parameters describe, and the input is ids of that model's vocabulary.

A GGUF whose tensors do not match its own metadata would fail deep inside a matrix
product with numpy's shape error, or worse, broadcast and run. So, at load:

* the architecture has weights (a vocab-only file has none) and an even
  ``head_dim`` (RoPE rotates pairs of dimensions);
* every tensor the forward reads (``tensor_names``) is present, with the shape the
  hyper-parameters imply (``expected_shapes``), and of a type the oracle
  dequantizes (``oracle.weights.check_types``).

Each failure is an ``UnsupportedModel`` (or ``UnsupportedTensorType``) naming the
file, the tensor and both shapes; a bad token id is a ``ValueError`` naming it.
"""

from __future__ import annotations

import numpy as np

from oracle.dispatch import Hparams, ModelSpec, UnsupportedModel
from oracle.gguf import GGUFFile
from oracle.weights import check_types

PER_LAYER = (
    "attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight",
    "ffn_norm.weight", "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight",
)  # fmt: skip
PER_LAYER_OF = {
    "qwen2": ("attn_q.bias", "attn_k.bias", "attn_v.bias"),
    "qwen3": ("attn_q_norm.weight", "attn_k_norm.weight"),
}


def tensor_names(architecture: str, n_layer: int, tied: bool) -> list[str]:
    """Every tensor the forward pass reads, by GGUF name."""
    per_layer = PER_LAYER + PER_LAYER_OF.get(architecture, ())
    names = ["token_embd.weight", "output_norm.weight"] + ([] if tied else ["output.weight"])
    return names + [f"blk.{i}.{p}" for i in range(n_layer) for p in per_layer]


def expected_shapes(hp: Hparams) -> dict[str, tuple[int, ...]]:
    """Numpy shapes of the tensors (``blk.<i>.`` stripped), from the hyper-parameters."""
    q_dim, kv_dim = hp.n_head * hp.head_dim, hp.n_head_kv * hp.head_dim
    return {
        "token_embd.weight": (hp.n_vocab, hp.n_embd), "output.weight": (hp.n_vocab, hp.n_embd),
        "output_norm.weight": (hp.n_embd,), "attn_norm.weight": (hp.n_embd,), "ffn_norm.weight": (hp.n_embd,),
        "attn_q.weight": (q_dim, hp.n_embd), "attn_k.weight": (kv_dim, hp.n_embd),
        "attn_v.weight": (kv_dim, hp.n_embd), "attn_output.weight": (hp.n_embd, q_dim),
        "attn_q.bias": (q_dim,), "attn_k.bias": (kv_dim,), "attn_v.bias": (kv_dim,),
        "attn_q_norm.weight": (hp.head_dim,), "attn_k_norm.weight": (hp.head_dim,),
        "ffn_gate.weight": (hp.n_ff, hp.n_embd), "ffn_up.weight": (hp.n_ff, hp.n_embd),
        "ffn_down.weight": (hp.n_embd, hp.n_ff),
    }  # fmt: skip


def check_runnable(gguf: GGUFFile, spec: ModelSpec) -> Hparams:
    """The hyper-parameters of a model the forward can run on ``gguf``'s tensors; raises otherwise."""
    hp = spec.hparams
    if hp is None or not gguf.tensors:
        raise UnsupportedModel(f"{gguf.path}: a vocab-only GGUF has no weights to run")
    if hp.head_dim % 2:
        raise UnsupportedModel(f"{gguf.path}: RoPE needs an even head_dim, got {hp.head_dim}")
    names = tensor_names(spec.architecture, hp.n_layer, bool(hp.tied_embeddings))
    missing = [n for n in names if n not in gguf.tensors]
    if missing:
        raise UnsupportedModel(
            f"{gguf.path}: {spec.architecture} model lacks tensors {', '.join(missing[:5])}"
        )
    shapes = expected_shapes(hp)
    for name in names:
        want, got = (
            shapes[name.split(".", 2)[-1] if name.startswith("blk.") else name],
            gguf.tensors[name].shape,
        )
        if want != got:
            raise UnsupportedModel(
                f"{gguf.path}: tensor {name} has shape {got}, hyper-parameters imply {want}"
            )
    check_types(gguf, names)
    return hp


def check_token_ids(ids: np.ndarray, n_vocab: int) -> None:
    """At least one id, and every id inside the vocabulary (an embedding row exists)."""
    if ids.size == 0:
        raise ValueError("prefill needs at least one token id")
    bad = ids[(ids < 0) | (ids >= n_vocab)]
    if bad.size:
        raise ValueError(f"token id {int(bad[0])} is outside the vocabulary (0..{n_vocab - 1})")
