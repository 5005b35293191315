"""Hugging Face checkpoint -> GGUF, for the tiny Qwen2/Qwen3 models the suite generates.

A deliberately small converter: it knows only the Qwen2/Qwen3 tensor layout, writes
F32, F16 or BF16 with gguf-py's ``GGUFWriter`` (1-D tensors — norms, biases —
always stay F32, as llama.cpp's converter keeps them), and copies a complete
tokenizer (every ``tokenizer.*`` key) from an existing GGUF so that the tiny model
tokenizes exactly like the real one. Quantized variants are made from the F32 file
with llama.cpp's own quantizer (``quantize``), so the quantized blocks are the ones
real GGUFs contain.

Qwen2/Qwen3 need no q/k row permutation (unlike llama): the HF projections map to
GGUF tensors one to one.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from gguf import GGUFWriter, quants
from gguf.constants import GGMLQuantizationType, LlamaFileType

from impl.hf.forward import GGUF_TO_HF_LAYER, GGUF_TO_HF_TOP
from oracle.gguf import open_gguf

FLOAT_TYPES = {
    "f32": (GGMLQuantizationType.F32, LlamaFileType.ALL_F32),
    "f16": (GGMLQuantizationType.F16, LlamaFileType.MOSTLY_F16),
    "bf16": (GGMLQuantizationType.BF16, LlamaFileType.MOSTLY_BF16),
}
# type id -> llama.cpp ftype name; "pure" quantization: every tensor that can be is
# quantized to this type (the K types need rows that are a multiple of 256; llama.cpp
# falls back to a legacy type for the others — tiny.py records which tensors got what).
QUANT_FTYPES = {
    "q8_0": "LLAMA_FTYPE_MOSTLY_Q8_0",
    "q4_0": "LLAMA_FTYPE_MOSTLY_Q4_0",
    "q4_1": "LLAMA_FTYPE_MOSTLY_Q4_1",
    "q5_0": "LLAMA_FTYPE_MOSTLY_Q5_0",
    "q5_1": "LLAMA_FTYPE_MOSTLY_Q5_1",
    "q4_k": "LLAMA_FTYPE_MOSTLY_Q4_K_S",
    "q5_k": "LLAMA_FTYPE_MOSTLY_Q5_K_S",
    "q6_k": "LLAMA_FTYPE_MOSTLY_Q6_K",
}

# transformers parameter name -> GGUF tensor name: the reference's table, inverted.
LAYER_NAMES = {hf: gguf for gguf, hf in GGUF_TO_HF_LAYER.items()}
TOP_NAMES = {hf: gguf for gguf, hf in GGUF_TO_HF_TOP.items()}


class ConvertError(Exception):
    """The checkpoint is not a Qwen2/Qwen3 model this converter handles."""


def gguf_name(hf_name: str) -> str:
    if hf_name in TOP_NAMES:
        return TOP_NAMES[hf_name]
    parts = hf_name.split(".", 3)  # model.layers.<i>.<rest>
    if parts[:2] == ["model", "layers"] and len(parts) == 4 and parts[3] in LAYER_NAMES:
        return f"blk.{parts[2]}.{LAYER_NAMES[parts[3]]}"
    raise ConvertError(f"no GGUF name for tensor {hf_name!r}")


def hf_to_gguf(checkpoint: Path, out: Path, out_type: str, tokenizer_gguf: Path, name: str) -> Path:
    """Write ``checkpoint`` (config.json + model.safetensors) as a GGUF of ``out_type``."""
    from safetensors.numpy import load_file

    cfg = json.loads((checkpoint / "config.json").read_text())
    arch = cfg["model_type"]
    if arch not in ("qwen2", "qwen3"):
        raise ConvertError(f"{checkpoint}: model_type {arch!r} is not qwen2/qwen3")
    tensor_type, file_type = FLOAT_TYPES[out_type]
    tensors = load_file(str(checkpoint / "model.safetensors"))
    if cfg.get("tie_word_embeddings"):
        tensors.pop("lm_head.weight", None)
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]

    w = GGUFWriter(str(out), arch)
    w.add_name(name)
    w.add_file_type(int(file_type))
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_freq_base(float(cfg.get("rope_theta") or cfg["rope_parameters"]["rope_theta"]))
    w.add_layer_norm_rms_eps(float(cfg["rms_norm_eps"]))
    copy_tokenizer(w, tokenizer_gguf)

    for hf_name in sorted(tensors, key=_order):
        data = np.ascontiguousarray(tensors[hf_name], dtype=np.float32)
        if data.ndim == 1 or tensor_type == GGMLQuantizationType.F32:
            w.add_tensor(gguf_name(hf_name), data)
        elif tensor_type == GGMLQuantizationType.F16:
            w.add_tensor(gguf_name(hf_name), data.astype(np.float16))
        else:
            packed = quants.quantize(data, tensor_type)
            w.add_tensor(gguf_name(hf_name), packed, raw_shape=packed.shape, raw_dtype=tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


def _order(hf_name: str) -> tuple[int, str]:
    """Embedding first, then layers in numeric order, then the head (llama.cpp's order)."""
    parts = hf_name.split(".")
    if parts[:2] == ["model", "layers"]:
        return (1 + int(parts[2]), hf_name)
    return (0, hf_name) if "embed" in hf_name else (1 << 20, hf_name)


def copy_tokenizer(w: GGUFWriter, source: Path) -> None:
    """Every ``tokenizer.*`` key of ``source`` (vocabulary, merges, types, specials, template)."""
    src = open_gguf(source, header_only=True)
    for key, value in src.metadata.items():
        if not key.startswith("tokenizer."):
            continue
        vtype = src.types[key]
        if key == "tokenizer.ggml.tokens":
            w.add_token_list(value)
        elif key == "tokenizer.ggml.merges":
            w.add_token_merges(value)
        elif key == "tokenizer.ggml.token_type":
            w.add_token_types([int(t) for t in value])
        elif vtype == "string":
            w.add_string(key, value)
        elif vtype == "bool":
            w.add_bool(key, bool(value))
        elif vtype == "uint32":
            w.add_uint32(key, int(value))
        elif vtype == "int32":
            w.add_int32(key, int(value))
        else:
            raise ConvertError(f"{source}: cannot copy tokenizer key {key!r} of type {vtype}")


def quantize(src: Path, out: Path, out_type: str, n_threads: int = 2) -> Path:
    """Quantize an F32 GGUF with llama.cpp's quantizer (``pure``: one type wherever it fits)."""
    import ctypes

    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, QUANT_FTYPES[out_type])
    params.pure = True
    params.nthread = n_threads
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(out).encode(), ctypes.byref(params))
    if rc != 0 or not out.exists():
        raise ConvertError(f"llama.cpp failed to quantize {src} to {out_type} (return code {rc})")
    return out
