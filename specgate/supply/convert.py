"""The Qwen2/Qwen3 tensor names and tokenizer keys of a GGUF the suite writes.

The tiny models (``specgate.supply.tiny``) are drawn with Hugging Face parameter names;
``gguf_name`` maps them to GGUF tensor names (Qwen2/Qwen3 need no q/k row permutation,
unlike llama: the HF projections map to GGUF tensors one to one) and ``tensor_order``
puts them in llama.cpp's order. ``tokenizer_keys`` / ``add_tokenizer`` copy a complete
tokenizer (every ``tokenizer.*`` key) from an existing GGUF, so that a tiny model
tokenizes exactly like the real one. ``quantize`` runs llama.cpp's own quantizer on a
GGUF (the oracle's tests use it to make a tensor type the oracle refuses).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gguf import GGUFWriter

from impl.hf.forward import GGUF_TO_HF_LAYER, GGUF_TO_HF_TOP
from oracle.gguf import open_gguf

# type id -> llama.cpp ftype name, for ``quantize`` (llama.cpp's own quantizer, "pure": every
# tensor that can be gets this type). The tiny models no longer use it (specgate.supply.tiny_quants
# writes their blocks); the oracle's tests use it to make a type the oracle refuses.
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


def tensor_order(hf_name: str) -> tuple[int, str]:
    """Embedding first, then layers in numeric order, then the head (llama.cpp's order)."""
    parts = hf_name.split(".")
    if parts[:2] == ["model", "layers"]:
        return (1 + int(parts[2]), hf_name)
    return (0, hf_name) if "embed" in hf_name else (1 << 20, hf_name)


def tokenizer_keys(source: Path) -> list[tuple[str, Any, str]]:
    """Every ``tokenizer.*`` key of ``source`` (vocabulary, merges, types, specials,
    template) as (key, value, gguf value type), in the file's order."""
    src = open_gguf(source, header_only=True)
    return [(k, v, src.types[k]) for k, v in src.metadata.items() if k.startswith("tokenizer.")]


def add_tokenizer(w: GGUFWriter, keys: list[tuple[str, Any, str]]) -> None:
    """Write ``tokenizer_keys`` into ``w``."""
    for key, value, vtype in keys:
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
            raise ConvertError(f"cannot copy tokenizer key {key!r} of type {vtype}")


def copy_tokenizer(w: GGUFWriter, source: Path) -> None:
    """Every ``tokenizer.*`` key of ``source`` into ``w``."""
    add_tokenizer(w, tokenizer_keys(source))


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
