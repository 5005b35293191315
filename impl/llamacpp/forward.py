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


class Cached:
    """One llama.cpp context's KV cache as the model a session drives
    (``oracle.session.Session``: ``prefill``, ``truncate``, ``reset``). ``prefill``
    evaluates ids after the cached ones in one ``Llama.eval`` (llama.cpp splits it into
    ``n_batch`` micro-batches); ``truncate(n)`` removes the positions from ``n`` on
    (``llama_memory_seq_rm`` through llama-cpp-python's context)."""

    def __init__(self, llm: Any) -> None:
        self.llm = llm
        self.reset()

    def reset(self) -> None:
        self._remove(0)

    def __len__(self) -> int:
        return int(self.llm.n_tokens)

    def truncate(self, n: int) -> None:
        if n < self.llm.n_tokens:
            self._remove(n)

    def _remove(self, n: int) -> None:
        if not self.llm._ctx.kv_cache_seq_rm(-1, n, -1):
            raise RuntimeError(f"llama.cpp refused to remove the KV from position {n} on")
        self.llm.n_tokens = n

    def prefill(self, ids: Sequence[int], outputs: Sequence[int] | None = None) -> np.ndarray:
        """Evaluate ``ids`` after the cached tokens: the last position's float32 logits, [1, n_vocab]."""
        import llama_cpp

        llm = self.llm
        if llm.n_tokens + len(ids) > llm.n_ctx():
            raise ValueError(
                f"{llm.n_tokens + len(ids)} tokens exceed the llama.cpp context of {llm.n_ctx()}"
            )
        llm.eval([int(i) for i in ids])
        last = llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1)
        return np.ctypeslib.as_array(last, shape=(1, llm.n_vocab())).astype(np.float32)
