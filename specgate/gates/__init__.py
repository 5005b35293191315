"""The stage gates: one thin test module per stage, parametrized by the specgate plugin
over (model x case) from the snapshots. ``specgate parity`` runs them (``specgate.parity``);
The plugin runs the cases model by model (``specgate.run.selection.group_by_model``), and
``conftest.py`` here drops the forward weights when the model changes (``release_forward_weights``)."""

from __future__ import annotations

import contextlib
import sys
from typing import Any


def free_unused_memory() -> None:
    """Collect what is unreachable, then hand freed heap pages back to the system: glibc
    keeps them mapped, and ``malloc_trim(0)`` returns them, so a large model dropped by one
    test does not stay resident under the next one."""
    import ctypes
    import ctypes.util
    import gc

    gc.collect()
    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to trim
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)


def release_forward_weights(specgate: Any) -> None:
    """Forward weights are dropped when the gates move on to another model — the oracle's
    float32 ``Model`` (~2 GB for the 0.5B) and every live reference's (transformers' float32
    model, llama.cpp's full context with its n_ctx x n_vocab logits buffer): the 0.5B's
    must not be held through the models after it. Tokenizers and parsed
    vocabularies stay (reloading transformers' GGUF tokenizer takes ~20 s)."""
    oracle = sys.modules.get("impl.oracle")
    if oracle is not None:
        oracle.release_forward()
    for engine in specgate.references.values():
        engine.release_forward()
    free_unused_memory()
