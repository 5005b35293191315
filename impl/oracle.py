"""The oracle as an engine: specgate's own reference implementation behind the protocol.

It is what ``nox -s parity`` gates by default, and what other engines are compared
with in development. It is *not* a reference for snapshots: snapshots come only
from independent references (transformers, llama.cpp, tiktoken, CPython regex).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from impl.protocol import Engine, ModelRef
from oracle import gguf


@lru_cache(maxsize=8)
def _gguf(path: Path) -> gguf.GGUFFile:
    return gguf.open_gguf(path)


class OracleEngine(Engine):
    name = "oracle"

    def version(self) -> str:
        from specgate import __version__

        return __version__

    # --- metadata stage -------------------------------------------------------
    def metadata(self, model: ModelRef) -> dict[str, Any]:
        from oracle.dispatch import dispatch

        return dispatch(_gguf(model.gguf)).as_dict()

    # --- tokenizer stage (split / encode / decode) ------------------------------

    # --- render stage -----------------------------------------------------------

    # --- forward stage (logits) ---------------------------------------------------

    # --- sampler stage (sample / generate) ------------------------------------------

