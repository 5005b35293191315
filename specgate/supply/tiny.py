"""Tiny deterministic Qwen2/Qwen3 models in every tensor type the oracle supports.

Small enough to run anywhere in milliseconds, shaped to exercise what real models
do: grouped-query attention (n_head_kv < n_head), Qwen2's q/k/v biases, Qwen3's
q/k norms with a ``head_dim`` different from ``n_embd / n_head``, tied embeddings,
and the real 151,936-row Qwen vocabulary (the tokenizer is copied from the real
Qwen2.5 GGUF, so prompts tokenize exactly as they do for a real model).

A tiny model is a pure function of its family spec (``specgate.supply.tiny_specs``) and type,
written with numpy and gguf-py alone — no torch, no llama.cpp — in seconds, and
byte-identical on every machine (the snapshots record its sha256):

1. ``weights(spec)``: float32 weights drawn from ``numpy.random.default_rng(spec.seed)``
   (PCG64; numpy is locked, so the stream is too), in a fixed order, scaled so that
   attention is far from uniform and the logits have a clear top-1, which a default
   0.02-std initialisation would not give. 1-D gains are uniform in [0.5, 1.5).
2. ``write_gguf``: the GGUF header (Qwen2/Qwen3 hparams), the tokenizer keys of the
   vocabulary source, then every tensor in llama.cpp's order (embedding, layers, norm,
   head), each quantized by ``specgate.supply.tiny_quants``: 1-D tensors stay F32; gguf-py's
   quantizers for F16/BF16/Q8_0/Q4_0/Q4_1/Q5_0/Q5_1, the project's numpy ones for
   Q4_K/Q5_K/Q6_K.

The K quants need rows that are a multiple of 256 values; with hidden sizes of 64-128
only tensors whose input dimension is ``n_ff`` (ffn_down) or ``n_head * head_dim`` = 256
(attn_output, qwen3) qualify, and the rest get the legacy type llama.cpp's quantizer
falls back to (``tiny_quants.K_FALLBACK``). ``tensor_types.json`` beside each GGUF
records which tensor got which type.

Until 2026-12 the weights went through transformers (an HF checkpoint) and the quantized
types through llama.cpp's ``llama_model_quantize``; the weights are the same draws, but
the quantized blocks now come from the numpy quantizers, so those files (and their
snapshots) changed once.

Model ids: ``tiny-<family>-<type>``, e.g. ``tiny-qwen2-q4_k``, ``tiny-qwen2-tied-f32``.
Generation is idempotent: existing files are kept, unless they no longer hash to the
sha256 recorded beside them when they were written, or were written by another
generator (``GENERATOR``, recorded beside them) — those are generated again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGUFWriter
from gguf.constants import GGML_QUANT_VERSION, GGUFValueType, LlamaFileType

from specgate.supply import convert
from specgate.supply import models as model_cache
from specgate.supply.tiny_quants import quantize, tensor_type
from specgate.supply.tiny_specs import FAMILIES, N_VOCAB, TYPES, VOCAB_SOURCE, TinySpec, model_ids, parse_id

__all__ = [
    "FAMILIES",
    "GENERATOR",
    "N_VOCAB",
    "TYPES",
    "VOCAB_SOURCE",
    "ArraysPacked",
    "TinySpec",
    "generate",
    "generate_all",
    "gguf_path",
    "model_ids",
    "parse_id",
    "weights",
    "write_gguf",
]

#: Names the generator; recorded beside every file it writes. Change it whenever a
#: change here changes the bytes written, so that caches regenerate their tiny models.
GENERATOR = "specgate.supply.tiny numpy+gguf v1"

FILE_TYPES = {
    "f32": LlamaFileType.ALL_F32, "f16": LlamaFileType.MOSTLY_F16, "bf16": LlamaFileType.MOSTLY_BF16,
    "q8_0": LlamaFileType.MOSTLY_Q8_0, "q4_0": LlamaFileType.MOSTLY_Q4_0, "q4_1": LlamaFileType.MOSTLY_Q4_1,
    "q5_0": LlamaFileType.MOSTLY_Q5_0, "q5_1": LlamaFileType.MOSTLY_Q5_1, "q4_k": LlamaFileType.MOSTLY_Q4_K_S,
    "q5_k": LlamaFileType.MOSTLY_Q5_K_S, "q6_k": LlamaFileType.MOSTLY_Q6_K,
}  # fmt: skip
BOS_ID, EOS_ID = 151643, 151645
#: A metadata array at least this long is packed once per generation run (``ArraysPacked``).
PACK_ONCE_MIN = 1024


#: The bytes gguf-py's writer packed for each long metadata array during one generation
#: run, keyed by the array's contents, the writer's byte order and the value type. Every tiny
#: model carries the same vocabulary (150k tokens, 150k merges, 150k types), which gguf-py
#: packs item by item in Python (~1.5 s of a model's ~2.5 s). Packing is a function of that
#: key, so an equal array's bytes are the bytes packed before: the files are the same, byte
#: for byte (their sha256 are pinned: ``tests/supply/test_tiny_models.py``).
ArraysPacked = dict[tuple[Any, ...], bytes]


class _Writer(GGUFWriter):
    """gguf-py's ``GGUFWriter``, reading long arrays' bytes from ``ArraysPacked``."""

    def __init__(self, path: str, arch: str, packed: ArraysPacked) -> None:
        super().__init__(path, arch)
        self.packed = packed

    def _pack_val(
        self, val: Any, vtype: GGUFValueType, add_vtype: bool, sub_type: GGUFValueType | None = None
    ) -> bytes:
        if vtype != GGUFValueType.ARRAY or not isinstance(val, list) or len(val) < PACK_ONCE_MIN:
            return super()._pack_val(val, vtype, add_vtype, sub_type)
        contents = tuple(val)
        try:
            hash(contents)
        except TypeError:  # an array of arrays: packed as gguf-py packs it
            return super()._pack_val(val, vtype, add_vtype, sub_type)
        key = (self.endianess, add_vtype, sub_type, contents)
        if key not in self.packed:
            self.packed[key] = super()._pack_val(val, vtype, add_vtype, sub_type)
        return self.packed[key]


def gguf_path(model_id: str) -> Path:
    return model_cache.tiny_gguf(model_id)


def weights(spec: TinySpec) -> dict[str, np.ndarray]:
    """HF-named float32 weights, drawn in this order from ``default_rng(spec.seed)``."""
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


def write_gguf(
    spec: TinySpec,
    kind: str,
    tensors: dict[str, np.ndarray],
    tokenizer: list[Any],
    out: Path,
    name: str,
    packed: ArraysPacked | None = None,
) -> dict[str, str]:
    """Write one tiny GGUF of type ``kind``; return tensor name -> ggml type name.
    ``packed``: the long arrays packed by earlier models of the same run."""
    w = _Writer(str(out), spec.arch, {} if packed is None else packed)
    w.add_name(name)
    w.add_file_type(int(FILE_TYPES[kind]))
    if kind not in ("f32", "f16", "bf16"):
        w.add_quantization_version(GGML_QUANT_VERSION)
    w.add_context_length(spec.n_ctx)
    w.add_embedding_length(spec.n_embd)
    w.add_feed_forward_length(spec.n_ff)
    w.add_block_count(spec.n_layer)
    w.add_head_count(spec.n_head)
    w.add_head_count_kv(spec.n_head_kv)
    w.add_key_length(spec.head_dim)
    w.add_value_length(spec.head_dim)
    w.add_rope_freq_base(float(spec.rope_base))
    w.add_layer_norm_rms_eps(float(spec.rms_eps))
    convert.add_tokenizer(w, tokenizer)
    types = {}
    for hf_name in sorted(tensors, key=convert.tensor_order):
        data, gguf_name = tensors[hf_name], convert.gguf_name(hf_name)
        qtype = tensor_type(kind, data.shape)
        packed = quantize(data, qtype)
        if packed.dtype == np.uint8:
            w.add_tensor(gguf_name, packed, raw_shape=packed.shape, raw_dtype=qtype)
        else:
            w.add_tensor(gguf_name, packed)
        types[gguf_name] = qtype.name
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return types


def generate(
    model_id: str,
    out: Path,
    vocab_gguf: Path,
    tokenizer: list[Any] | None = None,
    drawn: dict[str, dict[str, np.ndarray]] | None = None,
    packed: ArraysPacked | None = None,
) -> dict[str, str]:
    """Write the tiny model ``model_id`` to ``out`` (any path); return its tensor types.
    ``tokenizer`` (the vocabulary's keys), ``drawn`` (family -> weights) and ``packed``
    (the vocabulary's bytes) let a caller writing several models read, draw and pack each once."""
    parsed = parse_id(model_id)
    if parsed is None:
        raise ValueError(f"{model_id!r} is not a tiny model id (e.g. tiny-qwen2-f32)")
    family, kind = parsed
    spec = FAMILIES[family]
    tokenizer = convert.tokenizer_keys(vocab_gguf) if tokenizer is None else tokenizer
    drawn = {} if drawn is None else drawn
    if family not in drawn:
        drawn.clear()  # one family's weights at a time
        drawn[family] = weights(spec)
    return write_gguf(spec, kind, drawn[family], tokenizer, out, model_id, packed)


def _generator_path(target: Path) -> Path:
    return target.with_name(target.name + ".generator")


def _intact(model_id: str) -> bool:
    """Generated by this generator, and still hashing to the sha256 recorded when it was written."""
    target = gguf_path(model_id)
    if not target.exists():
        return False
    try:
        written_by = _generator_path(target).read_text().strip()
    except OSError:
        written_by = "an older generator (transformers + llama.cpp)"
    if written_by != GENERATOR:
        print(f"tiny: {target} was written by {written_by}, not {GENERATOR}; generating it again")
        return False
    try:
        model_cache.verify_tiny(model_id)
    except model_cache.CorruptModelError as exc:
        print(
            f"tiny: {exc.path} is corrupt (sha256 {exc.actual}, expected {exc.expected}); generating it again"
        )
        return False
    return True


def _write_into_cache(
    model_id: str,
    vocab_gguf: Path,
    tokenizer: list[Any],
    drawn: dict[str, dict[str, np.ndarray]],
    packed: ArraysPacked,
) -> None:
    """Write a model under a temporary name, its sidecars (tensor types, generator, sha256),
    then rename it into place and stamp it verified (so serving it does not hash it again)."""
    target = gguf_path(model_id)
    model_cache.writable(target.parent)
    tmp = target.with_suffix(".tmp")
    types = generate(model_id, tmp, vocab_gguf, tokenizer, drawn, packed)
    (target.parent / "tensor_types.json").write_text(json.dumps(types, indent=1) + "\n")
    _generator_path(target).write_text(GENERATOR + "\n")
    digest = model_cache.sha256_file(tmp)
    target.with_name(target.name + ".sha256").write_text(digest + "\n")
    tmp.replace(target)
    model_cache.record_verified(target, digest)


def generate_all(vocab_gguf: Path | None = None, log: bool = True) -> list[str]:
    """``specgate models tiny``: generate whatever tiny model is missing from the cache."""
    todo = [m for m in model_ids() if not _intact(m)]
    if not todo:
        print(f"tiny: all {len(model_ids())} tiny models already in {model_cache.cache_dir() / 'models'}")
        return []
    if vocab_gguf is None:
        vocab_gguf = model_cache.model_ref(VOCAB_SOURCE).gguf
    tokenizer, drawn, packed = convert.tokenizer_keys(Path(vocab_gguf)), {}, {}
    for model_id in todo:
        _write_into_cache(model_id, Path(vocab_gguf), tokenizer, drawn, packed)
        if log:
            print(f"tiny: wrote {gguf_path(model_id)}", flush=True)
    return todo
