"""Small GGUF files for tests, written with gguf-py's writer (an independent encoder)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGUFValueType, GGUFWriter

from oracle.byte_level import BYTE_TO_CHAR
from oracle.gguf import GGUFFile, open_gguf
from specgate.supply.derive import writer_value

QWEN2_HPARAMS = {
    "block_count": 2,
    "context_length": 256,
    "embedding_length": 64,
    "feed_forward_length": 128,
    "attention.head_count": 4,
    "attention.head_count_kv": 2,
    "rope.freq_base": 1000000.0,
    "attention.layer_norm_rms_epsilon": 1e-6,
}


def write_gguf(
    path: Path,
    arch: str = "qwen2",
    hparams: dict[str, Any] | None = None,
    tokens: list[str] | None = None,
    extra: dict[str, Any] | None = None,
    tensors: dict[str, np.ndarray] | None = None,
) -> Path:
    """A GGUF with ``arch`` hyper-parameters, a small vocabulary and the given tensors."""
    w = GGUFWriter(str(path), arch)
    for key, value in (QWEN2_HPARAMS if hparams is None else hparams).items():
        full = f"{arch}.{key}"
        if isinstance(value, float):
            w.add_float32(full, value)
        else:
            w.add_uint32(full, value)
    tokens = tokens if tokens is not None else ["a", "b", "ab", "<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types([1] * len(tokens))
    w.add_token_merges(["a b"])
    w.add_eos_token_id(len(tokens) - 1)
    w.add_bos_token_id(0)
    for key, value in (extra or {}).items():
        if isinstance(value, str):
            w.add_string(key, value)
        elif isinstance(value, bool):
            w.add_bool(key, value)
        else:
            w.add_uint32(key, value)
    return _finish(w, tensors or {"token_embd.weight": np.ones((len(tokens), 64), np.float32)}, path)


def real_header_sample(source: Path, dest: Path, max_array: int = 300) -> Path:
    """A small GGUF with a real model's key/values (arrays cut to ``max_array``
    entries) and its small F32 tensors: a realistic header to corrupt quickly."""
    g = open_gguf(source)
    arch = g.metadata["general.architecture"]
    w = GGUFWriter(str(dest), arch)
    writers = {
        "uint32": w.add_uint32,
        "int32": w.add_int32,
        "float32": w.add_float32,
        "bool": w.add_bool,
        "string": w.add_string,
        "uint64": w.add_uint64,
        "int64": w.add_int64,
        "float64": w.add_float64,
    }
    for key, value in g.metadata.items():
        kind = g.types[key]
        if key in ("general.architecture", "GGUF.version"):
            continue
        if kind.startswith("array"):
            w.add_array(key, [v.item() if hasattr(v, "item") else v for v in value[:max_array]])
        elif kind in writers:
            writers[kind](key, value)
    small = [t for t in g.tensors.values() if t.type_name == "F32" and len(t.shape) == 1][:6]
    for t in small:
        w.add_tensor(t.name, np.array(g.dequantize(t.name)))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dest


# ---------------------------------------------------------------------------
# typed key/values: a real GGUF's metadata, changed value by value

TypedValue = tuple[Any, GGUFValueType, "GGUFValueType | None"]  # value, type, array element type


def typed_metadata(g: GGUFFile) -> dict[str, TypedValue]:
    """Every key/value of ``g`` with its exact GGUF type, as ``write_typed`` takes them."""
    return {key: writer_value(g.types[key], value) for key, value in g.metadata.items()}


class _Writer(GGUFWriter):
    """gguf-py's writer, also writing the empty arrays GGUF allows and it refuses."""

    def _pack_val(
        self, val: Any, vtype: GGUFValueType, add_vtype: bool, sub_type: GGUFValueType | None = None
    ) -> bytes:
        if vtype == GGUFValueType.ARRAY and len(val) == 0:
            head = self._pack("I", vtype) if add_vtype else b""
            return head + self._pack("I", sub_type or GGUFValueType.UINT8) + self._pack("Q", 0)
        return super()._pack_val(val, vtype, add_vtype, sub_type)


def write_typed(path: Path, kvs: dict[str, TypedValue], tensors: dict[str, np.ndarray] | None = None) -> Path:
    """A GGUF holding exactly ``kvs`` (``general.architecture`` included, with whatever type
    it is given, or absent) and the F32 ``tensors``."""
    w = _Writer(str(path), "unused")
    w.kv_data[0].pop("general.architecture")  # the writer adds it as a string; kvs decide
    for key, (value, vtype, sub_type) in kvs.items():
        w.add_key_value(key, value, vtype, sub_type)
    return _finish(w, tensors or {}, path)


def compact_copy(source: GGUFFile, keep_tokens: int = 320, keep_merges: int = 200) -> tuple[dict, dict]:
    """A real GGUF's key/values and tensors with its vocabulary cut to a few hundred
    tokens (the first ``keep_tokens``, the 256 byte tokens, every token a ``*_token_id``
    names, the ChatML markers), ids renumbered and vocabulary-sized tensor rows cut to
    match: every other key, value and type stays the real one. Loading it takes
    milliseconds, so hundreds of mutated variants can be loaded in a test."""
    kvs = typed_metadata(source)
    tokens = source.metadata["tokenizer.ggml.tokens"]
    index = {tok: i for i, tok in enumerate(tokens)}
    id_keys = [k for k in kvs if k.startswith("tokenizer.ggml.") and k.endswith("_token_id")]
    named = {index[t] for t in (*BYTE_TO_CHAR.values(), "<|im_start|>", "<|im_end|>") if t in index}
    keep = sorted(
        set(range(min(keep_tokens, len(tokens))))
        | named
        | {int(source.metadata[k]) for k in id_keys if int(source.metadata[k]) < len(tokens)}
    )
    new_id = {old: new for new, old in enumerate(keep)}
    for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.scores"):
        if key in kvs:
            value, vtype, sub_type = kvs[key]
            kvs[key] = ([value[i] for i in keep], vtype, sub_type)
    if "tokenizer.ggml.merges" in kvs:
        value, vtype, sub_type = kvs["tokenizer.ggml.merges"]
        kvs["tokenizer.ggml.merges"] = (value[:keep_merges], vtype, sub_type)
    for key in id_keys:
        value, vtype, sub_type = kvs[key]
        if value in new_id:
            kvs[key] = (new_id[value], vtype, sub_type)
    for key, (value, vtype, sub_type) in list(kvs.items()):
        if key.endswith(".vocab_size") and value == len(tokens):
            kvs[key] = (len(keep), vtype, sub_type)
    tensors = {}
    for name, info in source.tensors.items():
        array = np.array(source.dequantize(name))
        tensors[name] = array[keep] if info.shape[0] == len(tokens) else array
    return kvs, tensors


def _finish(w: Any, tensors: dict[str, np.ndarray], path: Path) -> Path:
    """Add the F32 ``tensors`` and write the whole file."""
    for name, array in tensors.items():
        w.add_tensor(name, array)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
