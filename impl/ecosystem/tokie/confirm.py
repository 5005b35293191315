"""Hand reproductions of tokie divergences the specgate gates found, with tokie's own
public API only (no specgate). Prints one line per divergence; exit 0 when every one
still reproduces, 1 when one no longer does, 2 when the tokenizer file is missing.

The tokenizer is Qwen3's own upstream `tokenizer.json` (the file specgate's model cache
downloads beside `qwen3-vocab`); pass another path as the first argument.

    python impl/ecosystem/tokie/confirm.py [path/to/tokenizer.json]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import tokie

# This runs as a script: its parent folder (impl/ecosystem/) holds the shared
# report of the confirm scripts, divergences.py (stdlib only).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from divergences import attempt, report

DEFAULT_TOKENIZER = Path.home() / ".cache/specgate/models/qwen3-vocab/tokenizer.json"


def divergences(tok: tokie.Tokenizer) -> list[tuple[str, Any, Any]]:
    """(what, tokie's answer, the references' answer) per divergence."""
    return [
        (
            "encode ' Ⅸ' (a space, then the letter-number U+2168): the space is glued to Ⅸ",
            attempt(lambda: tok.encode(" Ⅸ", add_special_tokens=False).ids),
            # HF tokenizers 0.23.3 on this file, add_special_tokens=False; llama.cpp via
            # llama-cpp-python 0.3.36 on qwen3-vocab.gguf gives the same ids.
            [220, 70467, 101],
        ),
        (
            "encode 'x Ⅻ' (U+216B): the space is glued to Ⅻ",
            attempt(lambda: tok.encode("x Ⅻ", add_special_tokens=False).ids),
            # HF tokenizers 0.23.3 on this file, add_special_tokens=False
            [87, 220, 70467, 104],
        ),
        (
            "a contraction after a tab: encode \"\\t'l \\t's x\\t'll\\n'd\" splits 'l into ' and l",
            attempt(lambda: tok.encode("\t'l \t's x\t'll\n'd", add_special_tokens=False).ids),
            # llama.cpp's llama_tokenize on qwen3-vocab.gguf (snapshots/qwen3-vocab/encode.json,
            # case contr-after-tab/special)
            [197, 63866, 220, 197, 594, 856, 197, 3278, 198, 4172],
        ),
        (
            "decode_bytes of special-token ids <|im_start|> <think> Hello: tokie panics",
            attempt(lambda: tok.decode_bytes([151644, 151667, 9707])),
            # llama.cpp via llama-cpp-python 0.3.36 (detokenize, special=True) on qwen3-vocab.gguf;
            # HF tokenizers 0.23.3 decode(skip_special_tokens=False) gives the same text
            b"<|im_start|><think>Hello",
        ),
        (
            "decode_bytes of an id outside the vocabulary (999999): tokie panics, not skips",
            attempt(lambda: tok.decode_bytes([9707, 999999])),
            # HF tokenizers 0.23.3 decode([9707, 999999]) skips the unknown id: 'Hello'
            b"Hello",
        ),
    ]


def main(argv: list[str]) -> int:
    path = Path(argv[1]) if len(argv) > 1 else DEFAULT_TOKENIZER
    if not path.is_file():
        print(f"confirm tokie: missing {path} (Qwen3's tokenizer.json)")
        return 2
    tok = tokie.Tokenizer.from_json(str(path))
    return report(divergences(tok), "tokie", "reference")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
