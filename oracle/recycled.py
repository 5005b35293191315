"""Memory for the output projection's product, handed out again once nobody holds it.

A prefill's logits are [T, n_vocab] float32: 311 MB for 512 tokens of a Qwen vocabulary
(151,936 entries). Writing a product into newly mapped pages is slow on the machines this
suite runs on (a virtual machine hands freed memory back to its host, and touching it again
faults page by page): on the 0.5B model's 512-token prefill (2 OpenBLAS threads, 2-core VM,
2026-12-07) the output projection took 1.03-1.07 s into fresh memory against 0.69-0.73 s
into memory already touched, a tenth of the whole prefill. llama.cpp keeps one output
buffer per context for the same reason.

So the last array handed out is remembered and handed out again when the caller has let
go of it and of every view of it — CPython's reference count says so. An array anybody
still holds (a view of it, a tensor made from it) is never written over; then a new one is
made. Arrays above ``RETAINED_BYTES`` are not remembered: a long prompt's logits are not
kept resident between calls. Like the KV cache it serves, it is one caller's at a time: two
threads running one model's forward at once could both be handed the same memory.
"""

from __future__ import annotations

import sys

import numpy as np

RETAINED_BYTES = 512 << 20  # the 0.5B's 512-token logits (311 MB) are kept; 1,024 tokens' (622 MB) are not
_ONLY_HERE = 2  # sys.getrefcount of an array referenced by one attribute only (and the call's argument)


class RecycledArrays:
    """Hands out float32 arrays, reusing the last one's memory when nobody holds it."""

    def __init__(self, retained_bytes: int = RETAINED_BYTES) -> None:
        self.retained_bytes = retained_bytes
        self._last: np.ndarray | None = None  # flat, float32: the memory of the last array handed out

    def empty(self, shape: tuple[int, ...]) -> np.ndarray:
        """An uninitialized float32 array of ``shape``, in reused memory when it can be."""
        size = int(np.prod(shape))
        if self._last is not None and (sys.getrefcount(self._last) > _ONLY_HERE or self._last.size < size):
            self._last = None  # held elsewhere (never written over) or too small: let it go
        if self._last is None:
            flat = np.empty(size, dtype=np.float32)
            if flat.nbytes <= self.retained_bytes:
                self._last = flat
            return flat.reshape(shape)
        return self._last[:size].reshape(shape)
