"""Hole: an engine that Unicode-normalizes its input before tokenizing, as HF
``tokenizer.json`` (NFC) and many Rust/Python BPE ports do. The GGUF pipeline applies
no normalization (PROTOCOL.md 4.2), so on a text that normalization changes its ids
cannot be llama.cpp's: where HF's NFC answer is recorded it is a reference
disagreement naming hf, and where no reference normalized (or one also did something
else) it fails. It must never pass a case only because the references disagree.

The oracle with the text normalized first (``NFC`` by default, or the form given:
``NFD``, ``NFKC``, ``NFKD``), served over PROTOCOL.md:

    python tests/engines/holes/normalizes_input.py [NFC|NFD|NFKC|NFKD]
"""

from __future__ import annotations

import sys
import unicodedata
from typing import Any

from impl.oracle import OracleEngine
from impl.process.server import serve


class NormalizingEngine(OracleEngine):
    name = "normalizes-input"

    def __init__(self, form: str) -> None:
        super().__init__()
        self.form = form

    def split(self, model: Any, text: str) -> list[str]:
        return super().split(model, unicodedata.normalize(self.form, text))

    def encode(self, model: Any, text: str, parse_special: bool = True) -> list[int]:
        return super().encode(model, unicodedata.normalize(self.form, text), parse_special)


if __name__ == "__main__":
    sys.exit(serve(NormalizingEngine(sys.argv[1] if len(sys.argv) > 1 else "NFC")))
