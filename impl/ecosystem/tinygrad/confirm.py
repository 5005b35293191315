"""Hand reproductions of tinygrad divergences the specgate gates found, with tinygrad's own
public API only (no specgate, no adapter): the tokenizer `python -m tinygrad.llm` builds,
`SimpleTokenizer.from_gguf_kv` on the key-values of `tinygrad.llm.gguf.gguf_load`. Prints one
line per divergence; exit 0 when every one still reproduces, 1 when one no longer does, 2
when a GGUF is missing.

    python impl/ecosystem/tinygrad/confirm.py [--model path/to/qwen3-vocab.gguf]
        [--qwen36 path/to/qwen3.6-vocab.gguf]

The Qwen3.6 GGUF defaults to `qwen3.6-vocab/qwen3.6-vocab.gguf` beside the first one's folder
(specgate's model cache layout).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from tinygrad.llm.cli import SimpleTokenizer
from tinygrad.llm.gguf import gguf_load

# This runs as a script: its parent folder (impl/ecosystem/) holds the shared
# report of the confirm scripts, divergences.py (stdlib only).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from divergences import attempt, report

DEFAULT_GGUF = Path.home() / ".cache/specgate/models/qwen3-vocab/qwen3-vocab.gguf"


def tokenizer(gguf: Path) -> SimpleTokenizer:
    kv, _tensors = gguf_load(str(gguf))
    return SimpleTokenizer.from_gguf_kv(kv)


def divergences(qwen3: SimpleTokenizer, qwen36: SimpleTokenizer) -> list[tuple[str, Any, Any]]:
    """(what, tinygrad's answer, the references' answer) per divergence."""
    decode = lambda ids: attempt(lambda: qwen3.decode(ids).encode("utf-8"))  # noqa: E731
    return [
        (
            "decode answers U+FFFD for a piece ending inside a UTF-8 character: qwen3 ids [104811, 82912]",
            decode([104811, 82912]),
            # llama.cpp's token_to_piece bytes on qwen3-vocab.gguf (snapshots/qwen3-vocab/decode.json,
            # case ids-partial-end-3byte-cjk); HF tokenizers' byte-level pieces give the same bytes
            bytes.fromhex("e4b8ade69687e9be"),
        ),
        (
            "decode answers U+FFFD around a special token: qwen3 ids [9284, 151645, 104, 254]",
            decode([9284, 151645, 104, 254]),
            # llama.cpp's token_to_piece bytes (special=True), concatenated (specgate's case
            # ids-partial-around-special, minimized)
            b"\xf0\x9f<|im_end|>\xab\xa0",
        ),
        (
            "decode answers the [PAD] filler's text: qwen3 id [151935]",
            decode([151935]),
            # llama.cpp's token_to_piece of an UNUSED token (type 5) is empty
            # (snapshots/qwen3-vocab/decode.json, case ids-edge-last-id)
            b"",
        ),
        (
            "decode of an id outside the vocabulary (999999) raises instead of skipping it",
            decode([999999]),
            # PROTOCOL.md 4.2: unknown ids are skipped; HF tokenizers 0.23.3 decode([999999]) is ''
            # (snapshots/qwen3-vocab/decode.json, case ids-edge-999999)
            b"",
        ),
        (
            "encode 'क्षि' on Qwen3.6 does not make 'क्ष' (tinygrad ranks merges by token id, never reading the GGUF's merges)",
            attempt(lambda: qwen36.encode("क्षि")),
            # llama.cpp's llama_tokenize on qwen3.6-vocab.gguf (snapshots/qwen3.6-vocab/encode.json,
            # case devanagari-kshi/plain)
            [151858, 37565],
        ),
    ]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=DEFAULT_GGUF, help="qwen3-vocab.gguf")
    parser.add_argument("--qwen36", type=Path, default=None, help="qwen3.6-vocab.gguf")
    args = parser.parse_args(argv[1:])
    qwen36 = args.qwen36 or args.model.parent.parent / "qwen3.6-vocab" / "qwen3.6-vocab.gguf"
    for gguf in (args.model, qwen36):
        if not gguf.is_file():
            print(f"confirm tinygrad: missing {gguf}")
            return 2
    return report(divergences(tokenizer(args.model), tokenizer(qwen36)), "tinygrad", "reference")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
