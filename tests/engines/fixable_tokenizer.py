"""An engine whose defects are chosen on its command line, to gate it before and after a
fix (``specgate report diff``): the oracle served over PROTOCOL.md with

* ``lookahead`` — the pre-tokenizer without the ``\\s+(?!\\S)`` arm (a whitespace run
  before a word is taken whole);
* ``nfc`` — every text NFC-normalized before it is split or encoded.

    python tests/engines/fixable_tokenizer.py [--defects lookahead,nfc]
"""

from __future__ import annotations

import argparse
import sys
import unicodedata

from impl.process.server import serve
from oracle import pretokenize
from oracle.tokenizer import Tokenizer


def plant_lookahead() -> None:
    pretokenize.ARMS = tuple(arm for arm in pretokenize.ARMS if arm is not pretokenize.trailing_space)


def plant_nfc() -> None:
    encode, split = Tokenizer.encode, Tokenizer.split
    Tokenizer.encode = lambda self, text, *a, **k: encode(self, unicodedata.normalize("NFC", text), *a, **k)
    Tokenizer.split = lambda self, text, *a, **k: split(self, unicodedata.normalize("NFC", text), *a, **k)


DEFECTS = {"lookahead": plant_lookahead, "nfc": plant_nfc}

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--defects", default="", help=f"comma-separated, of {sorted(DEFECTS)}")
    for name in filter(None, parser.parse_args().defects.split(",")):
        DEFECTS[name]()
    sys.exit(serve("oracle"))
