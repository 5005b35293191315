"""Mutant engine: the pre-tokenizer without the ``\\s+(?!\\S)`` arm.

Without it a whitespace run before a word is taken whole by ``\\s+`` instead of
leaving its last space to glue onto the word: ``"a   b"`` splits as
``a | "   " | b`` instead of ``a | "  " | " b"``. Expected to fail the split and
encode gates.

    python tests/engines/mutants/tokenizer_no_lookahead.py   (serves PROTOCOL.md on stdio)
"""

from __future__ import annotations

import sys

from impl.process.server import serve
from impl.registry import resolve
from oracle import pretokenize


def plant() -> None:
    pretokenize.ARMS = tuple(arm for arm in pretokenize.ARMS if arm is not pretokenize.trailing_space)


if __name__ == "__main__":
    plant()
    sys.exit(serve(resolve("oracle")))
