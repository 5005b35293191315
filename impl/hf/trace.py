"""transformers' intermediates, named to the trace points (``oracle.trace``): the exact
class's reference.

One forward of transformers' own Qwen2/Qwen3 model (float32, eager attention, the
GGUF's dequantized weights: ``impl.hf.forward``), observed, not re-implemented:

* module forward hooks: ``embed_tokens`` → ``inp_embd``; per layer
  ``input_layernorm`` → ``attn_norm``, ``post_attention_layernorm``'s input →
  ``ffn_inp`` and its output → ``ffn_norm``, ``mlp`` → ``ffn_out``, the decoder layer's
  output → ``l_out``, ``o_proj``'s input → ``kqv_out``; ``norm`` → ``result_norm``,
  ``lm_head`` → ``result_output``;
* the attention function: queries, keys and values reach it after the QK-norm and
  RoPE (transformers applies both inside ``Qwen*Attention.forward``, not in modules),
  so an attention implementation registered under its own name (with eager's mask)
  records them (``Qcur``, ``Kcur``, ``Vcur``) and calls transformers' own eager
  attention. A live test holds the traced logits equal to the untraced ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from oracle.trace import Recorder

ATTENTION_NAME = "specgate_trace_eager"


def _register_attention() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask
    from transformers.models.qwen2 import modeling_qwen2

    def traced(module: Any, query: Any, key: Any, value: Any, *args: Any, **kwargs: Any) -> Any:
        recorder = getattr(module, "_specgate_recorder", None)
        if recorder is not None:
            layer = module.layer_idx
            for name, t in (("Qcur", query), ("Kcur", key), ("Vcur", value)):  # [1, heads, T, head_dim]
                recorder.heads(f"{name}-{layer}", t[0].detach().float().numpy())
        return modeling_qwen2.eager_attention_forward(module, query, key, value, *args, **kwargs)

    AttentionInterface.register(ATTENTION_NAME, traced)
    AttentionMaskInterface.register(ATTENTION_NAME, eager_mask)  # the causal mask eager attention gets


def trace(model: Any, ids: Sequence[int], points: Sequence[str],
          positions: Sequence[int] | None = None) -> dict[str, np.ndarray]:  # fmt: skip
    """The asked points of transformers' forward over ``ids`` from position 0."""
    import torch

    _register_attention()
    recorder = Recorder(points)
    inner = model.model

    def out_hook(name: str) -> Any:
        def hook(_module: Any, _inputs: Any, output: Any) -> None:
            value = output[0] if isinstance(output, tuple) else output
            recorder(name, value[0].detach().float().numpy())

        return hook

    def in_hook(name: str) -> Any:
        def hook(_module: Any, inputs: Any) -> None:
            recorder(name, inputs[0][0].detach().float().numpy())

        return hook

    handles = [inner.embed_tokens.register_forward_hook(out_hook("inp_embd")),
               inner.norm.register_forward_hook(out_hook("result_norm")),
               model.lm_head.register_forward_hook(out_hook("result_output"))]  # fmt: skip
    for i, layer in enumerate(inner.layers):
        handles += [
            layer.input_layernorm.register_forward_hook(out_hook(f"attn_norm-{i}")),
            layer.self_attn.o_proj.register_forward_pre_hook(in_hook(f"kqv_out-{i}")),
            layer.post_attention_layernorm.register_forward_pre_hook(in_hook(f"ffn_inp-{i}")),
            layer.post_attention_layernorm.register_forward_hook(out_hook(f"ffn_norm-{i}")),
            layer.mlp.register_forward_hook(out_hook(f"ffn_out-{i}")),
            layer.register_forward_hook(out_hook(f"l_out-{i}")),
        ]
        layer.self_attn._specgate_recorder = recorder
    previous = model.config._attn_implementation
    model.config._attn_implementation = ATTENTION_NAME
    try:
        with torch.inference_mode():
            model(torch.tensor([list(ids)], dtype=torch.long), use_cache=False)
    finally:
        model.config._attn_implementation = previous
        for h in handles:
            h.remove()
        for layer in inner.layers:
            layer.self_attn._specgate_recorder = None
    missing = [p for p in points if p not in recorder.values]
    if missing:
        raise ValueError(f"transformers' forward passed no point {missing[:5]}")
    rows = slice(None) if positions is None else list(positions)
    return {p: recorder.values[p][rows] for p in points}
