"""transformers' forward pass on a GGUF's weights: the tight logits reference.

The model runs in transformers' own Qwen2/Qwen3 modeling code, in float32, with the
eager attention path, on the very float32 weights the GGUF dequantizes to (gguf-py's
``dequantize``) — so any difference from the oracle is float32 rounding or a bug.

Two ways in, same weights:

* ``load_transformers_gguf`` — transformers' own GGUF loader
  (``from_pretrained(..., gguf_file=...)``): independent tensor naming and config
  mapping. Used for real models. Its config mapping misses
  ``qwen3.attention.key_length``, so ``head_dim`` is patched from that key (read
  with gguf-py's reader) or a Qwen3 with ``head_dim != 128`` gets the wrong shape.
* ``load_dequantized`` — ``from_config`` with a config built from the GGUF's
  hyper-parameters and every tensor dequantized by ``gguf.quants.dequantize`` and
  mapped to transformers' names here. transformers' loader parses the 150k-entry
  vocabulary with gguf-py's ``GGUFReader``, a minute per file on a busy 2-core
  machine; the tiny models (27 files) use this path. The tensor table (names,
  offsets, types) is read with specgate's GGUF reader, whose own tests check it
  against gguf-py; the forward computation and the dequantization stay the
  references'. A live test checks that both paths give the same logits.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

# GGUF tensor name (within a block) -> transformers parameter name; specgate/supply/convert.py
# reads the same table the other way round.
GGUF_TO_HF_LAYER = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
GGUF_TO_HF_TOP = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
        "output.weight": "lm_head.weight"}  # fmt: skip


def _hf_name(name: str) -> str:
    if name in GGUF_TO_HF_TOP:
        return GGUF_TO_HF_TOP[name]
    _, layer, rest = name.split(".", 2)
    return f"model.layers.{layer}.{GGUF_TO_HF_LAYER[rest]}"


def load_transformers_gguf(path: Path) -> Any:
    """transformers' own GGUF loading, float32 (~45 s for the 0.5B model)."""
    import torch
    from gguf import GGUFReader
    from transformers import AutoConfig, AutoModelForCausalLM

    path = Path(path)
    config = AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name)
    if config.model_type == "qwen3":
        field = GGUFReader(path).fields.get("qwen3.attention.key_length")
        if field is not None:
            config.head_dim = int(field.contents())
    config._attn_implementation = "eager"
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, config=config,
                                                 dtype=torch.float32)  # fmt: skip
    return model.eval()


def load_dequantized(path: Path) -> Any:
    """from_config + gguf-py-dequantized tensors (see the module docstring)."""
    import torch
    from gguf import quants
    from gguf.constants import GGMLQuantizationType
    from transformers import AutoModelForCausalLM, Qwen2Config, Qwen3Config

    from oracle.gguf import open_gguf

    g = open_gguf(path)
    arch = g.get("general.architecture")
    if arch not in ("qwen2", "qwen3"):
        raise ValueError(f"{path}: architecture {arch!r} is not qwen2/qwen3")

    def key(name: str) -> Any:
        return g.get(f"{arch}.{name}")

    n_head = int(key("attention.head_count"))
    config = (Qwen2Config if arch == "qwen2" else Qwen3Config)(
        vocab_size=len(g.get("tokenizer.ggml.tokens")), hidden_size=int(key("embedding_length")),
        intermediate_size=int(key("feed_forward_length")), num_hidden_layers=int(key("block_count")),
        num_attention_heads=n_head, num_key_value_heads=int(key("attention.head_count_kv") or n_head),
        head_dim=int(key("attention.key_length") or int(key("embedding_length")) // n_head),
        max_position_embeddings=int(key("context_length")), rms_norm_eps=float(key("attention.layer_norm_rms_epsilon")),
        rope_theta=float(key("rope.freq_base")), tie_word_embeddings="output.weight" not in g.tensors,
    )  # fmt: skip
    config._attn_implementation = "eager"
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    state = {}
    for name, info in g.tensors.items():
        raw = g.tensor_bytes(name).reshape(int(np.prod(info.shape[:-1], dtype=np.int64)), -1)
        w = (
            quants.dequantize(raw, GGMLQuantizationType(info.ggml_type))
            .astype(np.float32)
            .reshape(info.shape)
        )
        state[_hf_name(name)] = torch.from_numpy(w)
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [m for m in missing if not (config.tie_word_embeddings and m == "lm_head.weight")]
    if missing or unexpected:
        raise ValueError(
            f"{path}: tensors do not match transformers' {arch}: missing {missing}, unexpected {unexpected}"
        )
    if config.tie_word_embeddings:
        model.tie_weights()
    return model.eval()


def logits(model: Any, ids: Sequence[int]) -> np.ndarray:
    """Float32 logits [len(ids), n_vocab] for one sequence from position 0."""
    import torch

    with torch.inference_mode():
        out = model(torch.tensor([list(ids)], dtype=torch.long), use_cache=False).logits[0]
    return out.float().numpy()


class Cached:
    """transformers' model with a KV cache of its own (a ``DynamicCache``): the model a
    session drives (``oracle.session.Session``: ``prefill``, ``truncate``, ``reset``).
    ``prefill`` feeds ids on top of the cache (the forward's ``cache`` argument,
    ``past_key_values`` before transformers 5.2x: the positions continue from the cache's
    length); ``truncate(n)`` crops it to its first ``n`` tokens (``DynamicCache.crop`` of
    the tokens past ``n``: a negative count, which every version reads as "remove that
    many"). ``lm()`` gives the model on each call, so a cache does not pin its weights."""

    def __init__(self, lm: Callable[[], Any]) -> None:
        self.lm = lm
        self.reset()

    def reset(self) -> None:
        from transformers import DynamicCache

        self.cache = DynamicCache(config=self.lm().config)

    def __len__(self) -> int:
        return int(self.cache.get_seq_length())

    def truncate(self, n: int) -> None:
        if n < len(self):
            self.cache.crop(n - len(self))

    def prefill(self, ids: Sequence[int], outputs: Sequence[int] | None = None) -> np.ndarray:
        """Feed ``ids`` after the cached tokens: the last position's float32 logits, [1, n_vocab]."""
        import inspect

        import torch

        model = self.lm()
        argument = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
        with torch.inference_mode():
            feed = torch.tensor([[int(i) for i in ids]], dtype=torch.long)
            out = model(feed, use_cache=True, logits_to_keep=1, **{argument: self.cache})
        return out.logits[0, -1:].float().numpy().copy()
