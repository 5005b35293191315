"""transformers' reading of a GGUF's configuration: the dispatch reference.

``load_gguf_checkpoint(path, return_tensors=False)`` is exactly what
``from_pretrained(..., gguf_file=...)`` uses to build a model config, so its values
are what a transformers user would run with.
"""

from __future__ import annotations

import struct
from typing import Any

from impl.protocol import ModelRef

# transformers config key -> specgate hparam name
CONFIG_KEYS = {
    "num_hidden_layers": "n_layer",
    "hidden_size": "n_embd",
    "intermediate_size": "n_ff",
    "num_attention_heads": "n_head",
    "num_key_value_heads": "n_head_kv",
    "rope_theta": "rope_base",
    "rms_norm_eps": "rms_eps",
    "max_position_embeddings": "n_ctx",
    "vocab_size": "n_vocab",
    "tie_word_embeddings": "tied_embeddings",
}


def metadata_from_transformers(model: ModelRef) -> dict[str, Any]:
    from transformers import AutoConfig
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    parsed = load_gguf_checkpoint(str(model.gguf), return_tensors=False)
    raw = dict(parsed["config"])
    with open(model.gguf, "rb") as f:
        n_tensors = struct.unpack("<Q", f.read(16)[8:16])[0]
    if n_tensors == 0:
        # transformers infers tied embeddings from the absence of output.weight; a
        # vocab-only file has no tensors at all, so that inference says nothing.
        raw.pop("tie_word_embeddings", None)
    hparams: dict[str, Any] = {}
    for key, name in CONFIG_KEYS.items():
        if key in raw:
            hparams[name] = raw[key]
    if "n_vocab" not in hparams and "tokenizer" in parsed:
        hparams["n_vocab"] = len(parsed["tokenizer"].get("tokens", []))
    model_type = raw.get("model_type")
    if model_type and hparams.get("n_layer") is not None:
        # head_dim as the model class will use it: the config class's own default applies
        # when the GGUF conversion does not map a key for it.
        config = AutoConfig.for_model(model_type, **{k: v for k, v in raw.items() if k != "model_type"})
        hparams["head_dim"] = (
            getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        )
        rope = getattr(config, "rope_parameters", None) or {}
        if "rope_base" not in hparams and isinstance(rope, dict) and "rope_theta" in rope:
            hparams["rope_base"] = rope["rope_theta"]
    return {"architecture": model_type, "hparams": hparams}
