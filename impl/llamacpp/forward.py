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
