"""specgate adapter for the PyPI `tokie` package (a Rust BPE/WordPiece/Unigram
tokenizer): a `cmd:` engine speaking `specgate-jsonl/1` (PROTOCOL.md) over stdio.

Standalone on purpose: stdlib + `tokie` only (and the shared loop `../jsonl_engine.py`,
stdlib itself). tokie reads Hugging Face
`tokenizer.json` files and has no GGUF reader, so the adapter loads
`$SPECGATE_EXPORT_DIR/<model id>/tokenizer.json`, which the runner writes with
`specgate models export` (PROTOCOL.md section 9).

What tokie's public API offers, and what the adapter therefore answers:
- `encode`: `Tokenizer.encode(text, add_special_tokens=False)` (no BOS); added
  tokens in the text are always matched, so `parse_special=true` only. tokie has no
  switch to leave control tokens as text while still matching user-defined ones
  (`encode_bytes` matches no added token at all), so `parse_special=false` is refused;
- `decode`: `Tokenizer.decode_bytes(ids)`, tokie's raw-bytes decode. A Rust panic
  inside tokie (pyo3's `PanicException`, in any op) is answered as an `engine` error naming it;
- `split` is not offered (not in the handshake's capabilities, so the stage is n/a):
  tokie exposes no pre-tokenizer pieces.

    python impl/ecosystem/tokie/adapter.py
"""

from __future__ import annotations

import base64
import os
import sys
from functools import cache
from importlib.metadata import version
from pathlib import Path
from typing import Any

import tokie

# The adapter runs as a script: its parent folder (impl/ecosystem/) holds the shared
# specgate-jsonl/1 loop, jsonl_engine.py (stdlib only).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from jsonl_engine import BadRequest, Refusal, serve


@cache
def tokenizer(model_id: str) -> tokie.Tokenizer:
    export_dir = os.environ.get("SPECGATE_EXPORT_DIR")
    if not export_dir:
        raise BadRequest("SPECGATE_EXPORT_DIR is not set (run `specgate models export ID DIR` first)")
    path = Path(export_dir) / model_id / "tokenizer.json"
    if not path.is_file():
        raise BadRequest(f"missing {path} (run `specgate models export {model_id} {path.parent}`)")
    return tokie.Tokenizer.from_json(str(path))


def encode(request: dict[str, Any]) -> list[int]:
    if not request["parse_special"]:
        raise Refusal("tokie always matches added tokens in the text: no parse_special=false switch")
    return list(tokenizer(request["model"]["id"]).encode(request["text"], add_special_tokens=False).ids)


def decode(request: dict[str, Any]) -> dict[str, str]:
    data = tokenizer(request["model"]["id"]).decode_bytes(list(request["ids"]))
    return {"$bytes": base64.b64encode(bytes(data)).decode("ascii")}


HANDLERS = {"encode": encode, "decode": decode}


# --- the specgate-jsonl/1 loop ----------------------------------------------------------------


def main() -> int:
    return serve(
        {"engine": "tokie", "version": version("tokie"), "capabilities": ["encode", "decode"]},
        HANDLERS,
        panics_of="tokie",
    )


if __name__ == "__main__":
    sys.exit(main())
