"""The stage gates: one thin test module per stage, parametrized by the specgate plugin
over (model x case) from the snapshots. ``specgate parity`` runs them (``specgate.parity``);
The plugin runs the cases model by model (``specgate.run.selection.group_by_model``), and
``conftest.py`` here drops the forward weights when the model changes (``release_forward_weights``)."""

from __future__ import annotations

import contextlib
import sys
from typing import Any

#: Forward weights whose drop is worth a full garbage collection (the 0.5B's 1.9 GiB are; a
#: tiny model's 38-76 MiB, its vocabulary-wide embedding, are not): a collection walks every
#: live object — ~0.1 s with the parsed vocabularies a gate worker keeps — and the main job's
#: two workers moved between models 60 times, 6 s of collections where the oracle's dropped
#: ``Model`` had already been freed by its reference count.
COLLECT_BYTES = 256 * 2**20


def free_unused_memory(collect: bool = True) -> None:
    """Collect what is unreachable (unless ``collect`` is false), then hand freed heap pages
    back to the system: glibc keeps them mapped, and ``malloc_trim(0)`` returns them, so a
    large model dropped by one test does not stay resident under the next one."""
    import ctypes
    import ctypes.util
    import gc

    if collect:
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
    dropped = oracle.release_forward() if oracle is not None else 0
    for engine in specgate.references.values():
        engine.release_forward()
    # the oracle's ``Model`` is freed by its reference count; a reference's model (torch's
    # modules, llama.cpp's context) may sit in reference cycles
    free_unused_memory(collect=dropped >= COLLECT_BYTES or bool(specgate.references))
