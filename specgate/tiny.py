"""Tiny deterministic Qwen2/Qwen3 models in every tensor type the oracle supports.

Small enough to run anywhere in milliseconds, shaped to exercise what real models
do: grouped-query attention (n_head_kv < n_head), Qwen2's q/k/v biases, Qwen3's
q/k norms with a ``head_dim`` different from ``n_embd / n_head``, tied embeddings,
and the real 151,936-row Qwen vocabulary (the tokenizer is copied from the real
Qwen2.5 GGUF, so prompts tokenize exactly as they do for a real model).

Each family is built with transformers (``Qwen2Config`` / ``Qwen3Config`` and
``from_config``), its weights drawn from a fixed-seed numpy generator — scaled so
that attention is far from uniform and the logits have a clear top-1, which a
default 0.02-std initialisation would not give — saved as an HF checkpoint, then
exported by ``specgate.convert`` to F32/F16/BF16 and quantized with llama.cpp.

The K quants need rows that are a multiple of 256 values; with hidden sizes of
64-128 only tensors whose input dimension is ``n_ff`` (ffn_down) or
``n_head * head_dim`` = 256 (attn_output, qwen3) qualify, and llama.cpp falls back
to a legacy type for the rest. ``tensor_types.json`` beside each GGUF records
which tensor got which type.

Model ids: ``tiny-<family>-<type>``, e.g. ``tiny-qwen2-q4_k``, ``tiny-qwen2-tied-f32``.
Generation is idempotent: existing files are kept, unless they no longer hash to the
sha256 recorded beside them when they were written — those are generated again.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

from specgate import convert
from specgate import models as model_cache
from specgate.tiny_specs import FAMILIES, N_VOCAB, TYPES, VOCAB_SOURCE, TinySpec, model_ids, parse_id

__all__ = [
    "FAMILIES",
    "N_VOCAB",
    "TYPES",
    "VOCAB_SOURCE",
    "TinySpec",
    "generate_all",
    "gguf_path",
    "model_ids",
    "parse_id",
]


def gguf_path(model_id: str) -> Path:
    return model_cache.tiny_gguf(model_id)


def _weights(spec: TinySpec) -> dict[str, np.ndarray]:
    """HF-named float32 weights from a fixed-seed generator (see the module docstring)."""
    rng = np.random.default_rng(spec.seed)

    def normal(shape: tuple[int, ...], std: float) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    def gain(shape: tuple[int, ...]) -> np.ndarray:
        return rng.uniform(0.5, 1.5, shape).astype(np.float32)

    d, q_dim, kv_dim = spec.n_embd, spec.n_head * spec.head_dim, spec.n_head_kv * spec.head_dim
    logit_std = 3.0  # a clear but not one-hot next-token distribution
    out = {"model.embed_tokens.weight": normal((N_VOCAB, d), logit_std / np.sqrt(d) if spec.tied else 1.0)}
    for i in range(spec.n_layer):
        p = f"model.layers.{i}."
        out[p + "input_layernorm.weight"] = gain((d,))
        out[p + "self_attn.q_proj.weight"] = normal((q_dim, d), 1.5 / np.sqrt(d))
        out[p + "self_attn.k_proj.weight"] = normal((kv_dim, d), 1.5 / np.sqrt(d))
        out[p + "self_attn.v_proj.weight"] = normal((kv_dim, d), 1 / np.sqrt(d))
        if spec.arch == "qwen2":
            out[p + "self_attn.q_proj.bias"] = normal((q_dim,), 0.5)
            out[p + "self_attn.k_proj.bias"] = normal((kv_dim,), 0.5)
            out[p + "self_attn.v_proj.bias"] = normal((kv_dim,), 0.5)
        else:
            out[p + "self_attn.q_norm.weight"] = gain((spec.head_dim,))
            out[p + "self_attn.k_norm.weight"] = gain((spec.head_dim,))
        out[p + "self_attn.o_proj.weight"] = normal((d, q_dim), 1 / np.sqrt(q_dim))
        out[p + "post_attention_layernorm.weight"] = gain((d,))
        out[p + "mlp.gate_proj.weight"] = normal((spec.n_ff, d), 1 / np.sqrt(d))
        out[p + "mlp.up_proj.weight"] = normal((spec.n_ff, d), 1 / np.sqrt(d))
        out[p + "mlp.down_proj.weight"] = normal((d, spec.n_ff), 1 / np.sqrt(spec.n_ff))
    out["model.norm.weight"] = gain((d,))
    if not spec.tied:
        out["lm_head.weight"] = normal((N_VOCAB, d), logit_std / np.sqrt(d))
    return out


def build_checkpoint(spec: TinySpec, folder: Path) -> Path:
    """Create the model with transformers from its config, load the seeded weights, save it."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config, Qwen3Config

    config_cls = Qwen2Config if spec.arch == "qwen2" else Qwen3Config
    config = config_cls(
        vocab_size=N_VOCAB, hidden_size=spec.n_embd, intermediate_size=spec.n_ff,
        num_hidden_layers=spec.n_layer, num_attention_heads=spec.n_head, num_key_value_heads=spec.n_head_kv,
        head_dim=spec.head_dim, max_position_embeddings=spec.n_ctx, rms_norm_eps=spec.rms_eps,
        rope_theta=spec.rope_base, tie_word_embeddings=spec.tied, bos_token_id=151643, eos_token_id=151645,
    )  # fmt: skip
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    state = {k: torch.from_numpy(v) for k, v in _weights(spec).items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [m for m in missing if not (spec.tied and m == "lm_head.weight")]
    if missing or unexpected:
        raise RuntimeError(
            f"tiny {spec.arch}: weights do not match the transformers model: {missing} {unexpected}"
        )
    model.save_pretrained(folder)
    return folder


def tensor_types(path: Path) -> dict[str, str]:
    """Tensor name -> ggml type name."""
    from oracle.gguf import open_gguf

    return {name: info.type_name for name, info in open_gguf(path, header_only=True).tensors.items()}


def _finish(model_id: str, tmp: Path) -> None:
    """Move a freshly written GGUF into place with its sha256 and tensor-type sidecars, and
    stamp it verified (so serving it does not hash it again)."""
    target = gguf_path(model_id)
    (target.parent / "tensor_types.json").write_text(json.dumps(tensor_types(tmp), indent=1) + "\n")
    digest = model_cache.sha256_file(tmp)
    target.with_name(target.name + ".sha256").write_text(digest + "\n")
    tmp.replace(target)
    model_cache.record_verified(target, digest)


def _intact(model_id: str) -> bool:
    """Generated, and still hashing to the sha256 recorded when it was written."""
    if not gguf_path(model_id).exists():
        return False
    try:
        model_cache.verify_tiny(model_id)
    except model_cache.CorruptModelError as exc:
        print(
            f"tiny: {exc.path} is corrupt (sha256 {exc.actual}, expected {exc.expected}); generating it again"
        )
        return False
    return True


def generate_family(family: str, vocab_gguf: Path, log: bool = True) -> list[str]:
    """Every type of one family; returns the ids written (existing ones are skipped)."""
    spec = FAMILIES[family]
    todo = [t for t in spec.types if not _intact(f"tiny-{family}-{t}")]
    if not todo:
        return []
    work = model_cache.writable(model_cache.cache_dir() / "tiny-build" / family)
    checkpoint = work / "hf"
    if not (checkpoint / "model.safetensors").exists():
        build_checkpoint(spec, checkpoint)
    f32 = work / f"tiny-{family}-f32.gguf"
    if not f32.exists():
        convert.hf_to_gguf(checkpoint, work / "f32.tmp", "f32", vocab_gguf, f"tiny-{family}")
        (work / "f32.tmp").replace(f32)
    written = []
    for kind in todo:
        model_id = f"tiny-{family}-{kind}"
        model_cache.writable(gguf_path(model_id).parent)
        tmp = gguf_path(model_id).with_suffix(".tmp")
        if kind in convert.FLOAT_TYPES:
            convert.hf_to_gguf(checkpoint, tmp, kind, vocab_gguf, model_id)
        else:
            convert.quantize(f32, tmp, kind)
        _finish(model_id, tmp)
        written.append(model_id)
        if log:
            print(f"tiny: wrote {gguf_path(model_id)}", flush=True)
    return written


def generate_all(vocab_gguf: Path | None = None) -> list[str]:
    """``specgate models tiny``: generate whatever tiny model is missing from the cache."""
    if vocab_gguf is None:
        vocab_gguf = model_cache.model_ref(VOCAB_SOURCE).gguf
    written = [m for family in FAMILIES for m in generate_family(family, Path(vocab_gguf))]
    if not written:
        print(f"tiny: all {len(model_ids())} tiny models already in {model_cache.cache_dir() / 'models'}")
    if written:
        shutil.rmtree(model_cache.cache_dir() / "tiny-build", ignore_errors=True)
    return written
