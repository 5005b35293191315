"""Hole: an engine that aborts on a decode request holding an id outside the
vocabulary, as llama.cpp's ``token_to_piece`` does (``std::out_of_range`` in
``token_get_attr``). PROTOCOL.md 4.2 says such ids are skipped; the decode cases at
and past the vocabulary's edge must catch it: those cases are errors and the run fails.

The oracle, with that one defect, served over PROTOCOL.md:

    python tests/engines/holes/decode_aborts_past_vocabulary.py
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

from impl.oracle import OracleEngine
from impl.process.server import serve


class AbortingDecode(OracleEngine):
    name = "decode-aborts-past-vocabulary"

    def decode(self, model: Any, ids: Sequence[int]) -> bytes:
        n_vocab = len(self._tokenizer(model).tokens)
        outside = [i for i in ids if not 0 <= i < n_vocab]
        if outside:
            print(
                f"terminate called after throwing 'std::out_of_range': token id {outside[0]}", file=sys.stderr
            )
            sys.stderr.flush()
            os._exit(134)
        return super().decode(model, ids)


if __name__ == "__main__":
    sys.exit(serve(AbortingDecode()))
