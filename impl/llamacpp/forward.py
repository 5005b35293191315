"""llama.cpp's logits on the same GGUF: the loose logits reference.

llama.cpp multiplies quantized weights by activations it quantizes too (to Q8 blocks
for the quantized matmuls), and accumulates in its own order, so its logits differ
from a float32 forward by more than rounding; it is the reference for "what a
production engine gives", gated loosely.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def logits(llm: Any, ids: Sequence[int]) -> np.ndarray:
    """Float32 logits [len(ids), n_vocab] for one sequence from position 0 (cache cleared first)."""
    ids = [int(i) for i in ids]
    if len(ids) > llm.n_ctx():
        raise ValueError(f"{len(ids)} tokens exceed the llama.cpp context of {llm.n_ctx()}")
    llm.reset()
    llm.eval(ids)
    return np.array(llm.scores[: len(ids)], dtype=np.float32)


def played_logits(llm: Any, steps: Sequence[tuple[int, Sequence[int]]]) -> list[np.ndarray]:
    """llama.cpp's own KV cache played through ``steps`` from an empty cache: per step
    ``(keep, ids)`` the cache's positions from ``keep`` on removed when it holds more
    (``llama_memory_seq_rm`` through llama-cpp-python's context), then ``ids`` evaluated
    on top of it in one ``Llama.eval`` (llama.cpp splits it into ``n_batch`` micro-batches).
    The last position's float32 logits after each step."""
    llm.reset()
    rows = []
    for keep, ids in steps:
        if keep < llm.n_tokens:
            if not llm._ctx.kv_cache_seq_rm(-1, keep, -1):
                raise RuntimeError(f"llama.cpp refused to remove the KV from position {keep} on")
            llm.n_tokens = keep
        if llm.n_tokens != keep:
            raise ValueError(f"the cache holds {llm.n_tokens} tokens, the step keeps {keep}")
        if keep + len(ids) > llm.n_ctx():
            raise ValueError(f"{keep + len(ids)} tokens exceed the llama.cpp context of {llm.n_ctx()}")
        llm.eval([int(i) for i in ids])
        rows.append(np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32))
    return rows
