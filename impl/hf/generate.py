"""Greedy generation with transformers: ``model.generate(do_sample=False)`` on the
model the forward stage loads (``impl.hf.forward``: the GGUF's weights in float32),
stopping at the ids transformers' config and tokenizer give for eos and
``<|im_end|>``. The raw logits of every step are kept for the top-2 margins.

Greedy only, without stop strings (see ``impl.llamacpp.generate.check_greedy``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from impl.llamacpp.generate import check_greedy, generation, top_logits


def stop_ids(lm: Any, tokenizer: Any) -> list[int]:
    """eos as transformers' config has it (when set) and ``<|im_end|>`` from the tokenizer."""
    ids: set[int] = set()
    for eos in (lm.generation_config.eos_token_id, lm.config.eos_token_id):
        ids.update(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    im_end = tokenizer.token_to_id("<|im_end|>")  # a ``tokenizers.Tokenizer``
    if im_end is not None:
        ids.add(im_end)
    return sorted(ids)


def generate(
    lm: Any, tokenizer: Any, decode: Any, prompt: Sequence[int], params: Mapping[str, Any]
) -> dict[str, Any]:
    import torch

    max_tokens, n_top = check_greedy(params, "transformers")
    stops = stop_ids(lm, tokenizer)
    with torch.no_grad():
        out = lm.generate(
            torch.tensor([list(prompt)]),
            attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
            do_sample=False,
            max_new_tokens=max_tokens,
            eos_token_id=stops,
            pad_token_id=stops[0],
            output_logits=True,
            return_dict_in_generate=True,
            repetition_penalty=1.0,
        )
    new = out.sequences[0, len(prompt) :].tolist()
    steps = [
        {"top": top_logits(step[0].float().numpy().astype(np.float32), n_top), "token": t}
        for step, t in zip(out.logits, new, strict=True)
    ]
    finish = "length"
    if new and new[-1] in stops:
        new, finish = new[:-1], "stop_token"
    data = decode(new) if new else b""
    return generation(new, data, finish, steps)
