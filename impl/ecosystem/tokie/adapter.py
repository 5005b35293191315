"""specgate adapter for the PyPI `tokie` package (a Rust BPE/WordPiece/Unigram
tokenizer): a `cmd:` engine speaking `specgate-jsonl/1` (PROTOCOL.md) over stdio.

Standalone on purpose: stdlib + `tokie` only. tokie reads Hugging Face
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
import json
import os
import sys
from functools import cache
from importlib.metadata import version
from pathlib import Path
from typing import Any

import tokie


class Refusal(Exception):
    """A stated limitation: answered as an `unsupported` error."""


class BadRequest(Exception):
    """The request does not follow PROTOCOL.md: answered as a `bad_request` error."""


def is_rust_panic(exc: BaseException) -> bool:
    """pyo3 raises a Rust panic as `pyo3_runtime.PanicException`, a BaseException
    subclass that tokie does not export: recognized by its name."""
    return type(exc).__name__ == "PanicException"


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


def answer(request: dict[str, Any]) -> dict[str, Any]:
    handler = HANDLERS.get(request.get("op"))
    try:
        if handler is None:
            raise BadRequest(f"unknown op {request.get('op')!r}")
        return {"result": handler(request)}
    except Refusal as exc:
        return {"error": {"type": "unsupported", "message": str(exc)}}
    except BadRequest as exc:
        return {"error": {"type": "bad_request", "message": str(exc)}}
    except KeyError as exc:
        return {"error": {"type": "bad_request", "message": f"the request lacks the field {exc}"}}
    except Exception as exc:  # tokie failed on this input
        return {"error": {"type": "engine", "message": f"{type(exc).__name__}: {exc}"}}
    except BaseException as exc:
        if not is_rust_panic(exc):
            raise
        first_line = (str(exc).splitlines() or [""])[0]
        return {"error": {"type": "engine", "message": f"tokie panicked (Rust panic): {first_line}"}}


def serve() -> int:
    hello = {
        "protocol": "specgate-jsonl/1",
        "engine": "tokie",
        "version": version("tokie"),
        "capabilities": ["encode", "decode"],
    }
    print(json.dumps(hello), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
        except ValueError as exc:
            reply = {"id": None, "error": {"type": "bad_request", "message": f"not JSON: {exc}"}}
        else:
            if request.get("op") == "shutdown":
                break
            reply = {"id": request.get("id"), **answer(request)}
        print(json.dumps(reply, ensure_ascii=False), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(serve())
