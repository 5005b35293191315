"""``oracle.allocator``: after a forward ``Model`` is made, a block the size of a prefill's
temporaries comes from malloc's heap and, once freed, stays there for the next one —
read from glibc's own accounting (``mallinfo2``), in a fresh interpreter each time (the
setting is process-wide)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from oracle.template_bounds import _MALLINFO2

MODEL = "tiny-qwen3-f32"
BLOCK_MB = 300  # the logits of a ~500-token prompt of a 151,936-token vocabulary

# Prints glibc's mapped bytes (hblkhd) while a BLOCK_MB array is alive, and the heap's
# size (arena) after it is freed — with or without a forward Model made first.
PROBE = """
import ctypes, json, sys
import numpy as np
from oracle.template_bounds import _MALLINFO2
make_model, gguf = json.loads(sys.argv[1])
if make_model:
    from oracle.forward import Model
    Model.from_gguf(gguf)
block = np.ones((int(sys.argv[2]) << 20) // 4, dtype=np.float32)
mapped = _MALLINFO2().hblkhd
del block
print(json.dumps({"mapped": mapped, "heap_after_free": _MALLINFO2().arena}))
"""

pytestmark = pytest.mark.skipif(_MALLINFO2 is None, reason="glibc's mallinfo2 is not available here")


def probe(make_model: bool, gguf: str) -> dict[str, int]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps([make_model, gguf]), str(BLOCK_MB)],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return json.loads(done.stdout)


def test_a_prefill_sized_block_is_kept_in_the_heap_once_a_model_is_made(tiny_model):
    block = BLOCK_MB << 20
    plain = probe(False, str(tiny_model.gguf))
    assert plain["mapped"] >= block, plain  # glibc's default: a fresh mapping, unmapped on free
    tuned = probe(True, str(tiny_model.gguf))
    assert tuned["mapped"] < block, tuned  # served from the heap
    assert tuned["heap_after_free"] >= block, tuned  # and kept there, freed, for the next pass
